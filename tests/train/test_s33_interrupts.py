"""`dllm-lsp train model` stopped the way the unattended GPU job stops it (SIGTERM to its process
group, with DataLoader workers), by Ctrl-C, or by a write that fails (a full disk), and continued
from a damaged folder: the model folder is always the last whole save, never a half-written one,
and every failure is one line."""
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dllm_lsp.arch.embedded import EmbeddedConfig, EmbeddedModel
from dllm_lsp.arch.tiny import sample_corpus
from dllm_lsp.arch.tokenizer import special_ids, train_tokenizer
from dllm_lsp.loader import load_model
from dllm_lsp.train.cli import main
from dllm_lsp.train.folder import save_model_folder
from dllm_lsp.train.whole_folder import replaced_folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A corpus folder as `train corpus` writes it: real Python files, long enough for tiny-test's window."""
    folder = tmp_path_factory.mktemp("corpus")
    texts = [text for text in sample_corpus() if len(text) > 2000][:6]
    for split, part in (("train", texts[:5]), ("val", texts[5:])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": t, "language": "python"}) + "\n"
                                                       for t in part))
    return folder


def model_args(corpus: Path, tokenizer: Path, out: Path, *extra: str) -> list[str]:
    return ["model", "--corpus", str(corpus), "--tokenizer", str(tokenizer), "--out", str(out),
            "--preset", "tiny-test", "--threads", "1", "--eval-every", "100000", *extra]


def start_training(corpus: Path, tokenizer: Path, out: Path, *extra: str) -> subprocess.Popen:
    """A run that would go on for an hour and saves only at its end, in its own process group
    (as the GPU job starts it), once it has logged its first step."""
    proc = subprocess.Popen([sys.executable, "-m", "dllm_lsp", "train",
                             *model_args(corpus, tokenizer, out, "--minutes", "60", "--save-every", "100000", *extra)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log = out / "train_log.jsonl"
    while not (log.is_file() and log.read_text().strip()):
        if proc.poll() is not None:
            pytest.fail(f"training ended before its first step: {proc.communicate()[0][-2000:]}")
        time.sleep(0.2)
    return proc


def assert_final_save(proc: subprocess.Popen, out: Path, signal_name: str) -> None:
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, output[-3000:]
    assert "Traceback" not in output and f"stopped ({signal_name})" in output, output[-3000:]
    summary = json.loads((out / "training.json").read_text())
    assert summary["final"] is True and summary["steps"] >= 1
    load_model(out, "cpu")


@pytest.mark.timeout(180)
def test_sigterm_to_the_process_group_with_workers_stops_and_saves(corpus, small_tokenizer_path, tmp_path):
    """The GPU job stops a trainer with SIGTERM to its process group. The DataLoader workers died
    of it too, and torch's SIGCHLD handler raised "DataLoader worker ... is killed by signal:
    Terminated" in the trainer (in its final validation): exit 1, a traceback, no final save."""
    out = tmp_path / "model"
    proc = start_training(corpus, small_tokenizer_path, out, "--workers", "2")
    os.killpg(proc.pid, signal.SIGTERM)
    assert_final_save(proc, out, "SIGTERM")


@pytest.mark.timeout(180)
def test_ctrl_c_stops_at_the_next_step_and_saves(corpus, small_tokenizer_path, tmp_path):
    """SIGINT raised KeyboardInterrupt wherever the loop was: exit 130 and every step since the
    last save lost (here, with no save yet, no model at all)."""
    out = tmp_path / "model"
    proc = start_training(corpus, small_tokenizer_path, out)
    os.kill(proc.pid, signal.SIGINT)
    assert_final_save(proc, out, "SIGINT")


class FileSizeLimit:
    """Files this process writes may not grow past `limit` bytes: a write past it fails (EFBIG),
    as a full disk fails one (SIGXFSZ ignored, so the write returns the error instead of killing)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def __enter__(self):
        self.soft, self.hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        self.handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.limit, self.hard))

    def __exit__(self, *exc):
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.soft, self.hard))
        signal.signal(signal.SIGXFSZ, self.handler)


def test_a_save_that_fails_half_way_leaves_the_previous_folder_whole(small_tokenizer_path, tmp_path):
    """The folder was rewritten in place: new weights, then the tokenizer copied over the old one.
    A write failing there (a full disk, a kill) left the new weights with the old config and a
    truncated tokenizer.json: no model at all where the GPU job packs its result."""
    folder = tmp_path / "model"
    torch.manual_seed(0)
    small = dict(dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=32)
    first = EmbeddedModel(EmbeddedConfig(vocab_size=512, **small))
    save_model_folder(first, small_tokenizer_path, folder)
    (folder / "train_log.jsonl").write_text('{"step": 1}\n')
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    # A bigger model, with a tokenizer file too big to be written under the limit (its weights are not).
    big_tokenizer = train_tokenizer(sample_corpus(), 2000)
    special_ids(big_tokenizer)
    big_tokenizer.save(str(tmp_path / "tokenizer-2000.json"))
    second = EmbeddedModel(EmbeddedConfig(vocab_size=2000, **small))
    assert (tmp_path / "tokenizer-2000.json").stat().st_size > 100_000
    with FileSizeLimit(100_000), pytest.raises(OSError):
        save_model_folder(second, tmp_path / "tokenizer-2000.json", folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []   # no half folder left
    assert load_model(folder, "cpu") is not None

    # A save that succeeds replaces the folder whole, and keeps the folder's other files.
    save_model_folder(second, tmp_path / "tokenizer-2000.json", folder)
    assert (folder / "tokenizer.json").read_bytes() == (tmp_path / "tokenizer-2000.json").read_bytes()
    assert (folder / "train_log.jsonl").read_text() == '{"step": 1}\n'
    assert json.loads((folder / "config.json").read_text())["vocab_size"] == 2000


def test_a_save_killed_between_its_renames_is_put_back(small_tokenizer_path, tmp_path):
    """A kill between moving the old folder aside and renaming the new one in leaves the folder at
    `.NAME.old`: the next save (and the next `train`) puts it back, with its training log, instead
    of starting a folder without it."""
    folder = tmp_path / "model"
    model = EmbeddedModel(EmbeddedConfig(vocab_size=512, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=32))
    save_model_folder(model, small_tokenizer_path, folder)
    (folder / "train_log.jsonl").write_text('{"step": 1}\n')
    os.replace(folder, replaced_folder(folder))      # where such a kill leaves it
    save_model_folder(model, small_tokenizer_path, folder)
    assert (folder / "train_log.jsonl").read_text() == '{"step": 1}\n'
    assert not replaced_folder(folder).exists()


def test_a_full_disk_at_a_save_is_one_line_naming_what_the_folder_holds(corpus, small_tokenizer_path, tmp_path,
                                                                       capsys):
    """The optimizer state (1.3 MB for tiny-test) was written in place after the folder: a full
    disk there was a RuntimeError traceback from torch.save and a torn state file left behind."""
    out = tmp_path / "model"
    handler = signal.getsignal(signal.SIGINT)   # the default, or SIG_IGN under a shell's background job
    with FileSizeLimit(1_000_000):
        rc = main(model_args(corpus, small_tokenizer_path, out, "--steps", "4", "--save-every", "2"))
    err = capsys.readouterr().err
    assert rc == 1, err
    assert err.startswith("dllm-lsp train: error: could not write the model folder") and err.count("\n") == 1, err
    assert "at step 2" in err and "nothing was saved" in err, err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []   # no torn state or half folder
    assert signal.getsignal(signal.SIGINT) is handler      # the loop's handlers are undone


@pytest.mark.parametrize("name, text, expected", [
    ("config.json", '{"dim": ', "config.json is not valid JSON"),
    ("config.json", "[1]", "config.json must hold a JSON object"),
    ("training.json", '{"steps": ', "training.json is not valid JSON"),
    ("training.json", "[]", "training.json must hold a JSON object"),
])
@pytest.mark.parametrize("preset", [[], ["--preset", "tiny-test"]])
def test_continuing_a_damaged_folder_is_one_line_naming_its_file(corpus, small_tokenizer_path, tmp_path, capsys,
                                                                name, text, expected, preset):
    """A damaged config.json or training.json was a traceback (AttributeError: 'list' object has no
    attribute 'get') or a bare "Expecting value: line 2 column 1", naming no file."""
    folder = tmp_path / "shipped"
    model = EmbeddedModel(EmbeddedConfig(vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128))
    save_model_folder(model, small_tokenizer_path, folder)
    (folder / name).write_text(text)
    args = model_args(corpus, small_tokenizer_path, tmp_path / "out", "--steps", "1", "--init-from", str(folder))
    if not preset:
        args.remove("--preset")
        args.remove("tiny-test")
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 1, err
    assert err.startswith("dllm-lsp train: error: ") and err.count("\n") == 1, err
    assert expected in err and "Traceback" not in err, err


@pytest.mark.parametrize("tail, expected", [
    (b'{"text": "abc', "train.jsonl, line 2: not a corpus record (Unterminated string"),
    (b"[1]\n", "train.jsonl, line 2: not a corpus record (not a record with a text and a language)"),
    (bytes(range(128, 256)) * 40, "train.jsonl: not UTF-8 text past line"),
])
def test_a_torn_corpus_file_is_one_line_naming_it(small_tokenizer_path, tmp_path, capsys, tail, expected):
    """A corpus file cut short (a disk filled while `train corpus` wrote it) or not a corpus's was a
    bare JSON or codec error, or a KeyError, naming neither the file nor the line."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    good = json.dumps({"text": "x = 1\n" * 200, "language": "python"}) + "\n"
    (corpus / "train.jsonl").write_bytes(good.encode() + tail)
    (corpus / "val.jsonl").write_text(good)
    rc = main(model_args(corpus, small_tokenizer_path, tmp_path / "out", "--steps", "1"))
    err = capsys.readouterr().err
    assert rc == 1, err
    assert err.startswith("dllm-lsp train: error: ") and err.count("\n") == 1, err
    assert expected in err and "build the corpus again" in err, err

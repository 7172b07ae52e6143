"""A refused `dllm-lsp train` leaves its --out as it found it: a folder it would have made is not
made, a folder that was there keeps every byte. Refusals after the corpus is read (a corpus too
small for the window, a tokenizer that cannot encode code, a first step out of memory) made an
empty --out folder, or truncated a trained folder's log, before they said they could not train."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from dllm_lsp.arch.tiny import sample_corpus
from dllm_lsp.train.cli import main


def write_corpus(folder: Path, texts: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for split, part in (("train", texts[:-1]), ("val", texts[-1:])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": t, "language": "python"}) + "\n"
                                                       for t in part))
    return folder


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Real Python files, each long enough for a 1024-token window (3 bytes a token)."""
    return write_corpus(tmp_path_factory.mktemp("corpus"), [t for t in sample_corpus() if len(t) > 3200][:4])


def model_args(corpus: Path, tokenizer: Path, out: Path, *extra: str) -> list[str]:
    return ["model", "--corpus", str(corpus), "--tokenizer", str(tokenizer), "--out", str(out),
            "--preset", "tiny-test", "--steps", "1", "--threads", "1", *extra]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def trained_looking_folder(folder: Path) -> dict[str, bytes]:
    """A model folder's files as an earlier run left them (what a refused run must not change)."""
    folder.mkdir(parents=True)
    (folder / "train_log.jsonl").write_text('{"step": 10, "loss": 3.5}\n{"step": 20, "loss": 3.1}\n')
    (folder / "training.json").write_text('{"steps": 20}\n')
    return snapshot(folder)


def one_line_error(capsys, rc: int, expected: str) -> None:
    err = capsys.readouterr().err
    assert rc == 1, err
    assert err.startswith("dllm-lsp train: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert expected in err, err


def test_a_corpus_too_small_for_the_window_makes_no_out_folder(tmp_path, small_tokenizer_path, capsys):
    small = write_corpus(tmp_path / "small", ["x = 1\n", "y = 2\n"])
    out = tmp_path / "runs" / "model"
    rc = main(model_args(small, small_tokenizer_path, out))
    one_line_error(capsys, rc, "no corpus files are long enough for the training window")
    assert not out.exists() and not out.parent.exists()
    # A folder that was there is left as it was.
    before = trained_looking_folder(out)
    rc = main(model_args(small, small_tokenizer_path, out))
    one_line_error(capsys, rc, "no corpus files are long enough")
    assert snapshot(out) == before


def test_a_tokenizer_that_cannot_encode_code_is_one_line_before_any_work(tmp_path, corpus, capsys):
    # A word-level tokenizer with the special tokens but no unknown token: it loads, and its first
    # encoding of a corpus file raised a bare Exception (a traceback) while batches were built.
    words = Tokenizer(models.WordLevel({"<mask>": 0, "<pad>": 1, "<eos>": 2, "def": 3}))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "words.json"
    words.save(str(path))
    out = tmp_path / "model"
    rc = main(model_args(corpus, path, out))
    one_line_error(capsys, rc, f"the tokenizer {path} cannot encode code (WordLevel error: Missing [UNK] token")
    assert not out.exists()


def test_an_out_that_is_or_lies_under_a_file_is_refused_before_any_work(tmp_path, corpus, small_tokenizer_path, capsys):
    plain = tmp_path / "plain.txt"
    plain.write_text("not a folder\n")
    one_line_error(capsys, main(model_args(corpus, small_tokenizer_path, plain)), f"--out {plain} is a file")
    rc = main(model_args(corpus, small_tokenizer_path, plain / "model"))
    one_line_error(capsys, rc, f"cannot write the model folder {plain / 'model'}: {plain} is a file")
    assert plain.read_text() == "not a folder\n"


def test_a_refused_corpus_build_makes_no_out_folder(tmp_path, capsys):
    out = tmp_path / "work" / "corpus"
    empty = tmp_path / "nothing-licensed"
    empty.mkdir()
    rc = main(["corpus", "--out", str(out), "--folder", str(empty), "--assume-license", "MIT",
               "--decontaminate", os.devnull])
    one_line_error(capsys, rc, "no permissively licensed source files found")
    assert not out.exists() and not out.parent.exists()
    rc = main(["corpus", "--out", str(out), "--folder", str(tmp_path / "missing"), "--decontaminate", os.devnull])
    one_line_error(capsys, rc, "does not exist")
    assert not out.exists()


@pytest.mark.timeout(300)
def test_a_first_step_out_of_memory_is_one_line_and_leaves_the_folder_as_it_was(tmp_path, corpus, small_tokenizer_path):
    """A real allocation failure: the run is a child whose address space is capped (RLIMIT_AS) a
    gigabyte above what it holds once imported, and a 128 x 1024 window batch needs more than
    that (its attention scores alone are 2 GiB). As root too, and without a big machine."""
    out = tmp_path / "model"
    before = trained_looking_folder(out)
    args = model_args(corpus, small_tokenizer_path, out, "--seq-len", "1024", "--batch-size", "128", "--eval-every", "5")
    code = textwrap.dedent(f"""
        import resource, sys
        from dllm_lsp.train.cli import main
        held = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (held + 2**30, held + 2**30))
        sys.exit(main({args!r}))
    """)
    # One thread each for torch and the tokenizers: their thread pools' stacks would take the cap.
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=280, env=env)
    assert run.returncode == 1, run.stderr[-3000:]
    assert run.stderr.startswith("dllm-lsp train: error: out of memory on CPU") and "Traceback" not in run.stderr
    assert "at step 1" in run.stderr and "a smaller --batch-size, --seq-len or --preset; nothing was trained" in run.stderr
    assert snapshot(out) == before      # its log was truncated to the new run's

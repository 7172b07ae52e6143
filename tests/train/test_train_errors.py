"""`dllm-lsp train` refuses bad settings with one line and exit status 1, before any work: no
traceback, and no run that never ends (a step or time budget of 0 used to mean "no budget")."""
import json
from pathlib import Path

import pytest

from dllm_lsp.arch.tiny import sample_corpus
from dllm_lsp.train.cli import main


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A corpus folder as `train corpus` writes it: real Python files, long enough for tiny-test's window."""
    folder = tmp_path_factory.mktemp("corpus")
    texts = [text for text in sample_corpus() if len(text) > 2000][:4]
    for split, part in (("train", texts[:3]), ("val", texts[3:])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": t, "language": "python"}) + "\n"
                                                       for t in part))
    return folder


def run_model(corpus: Path, tokenizer: Path, out: Path, *extra: str) -> list[str]:
    return ["model", "--corpus", str(corpus), "--tokenizer", str(tokenizer), "--out", str(out),
            "--preset", "tiny-test", "--threads", "1", *extra]


def assert_one_line_error(capsys, rc: int, expected: str) -> None:
    err = capsys.readouterr().err
    assert rc == 1, err
    assert err.startswith("dllm-lsp train: error: ") and err.count("\n") == 1, err
    assert expected in err and "Traceback" not in err, err


@pytest.mark.timeout(60)    # the budgets below used to train forever
@pytest.mark.parametrize("extra, expected", [
    (["--steps", "0"], "--steps must be at least 1, not 0"),
    (["--steps", "-1"], "--steps must be at least 1, not -1"),
    (["--minutes", "0"], "--minutes must be more than 0, not 0"),
    (["--minutes", "-2"], "--minutes must be more than 0, not -2"),
    (["--steps", "1", "--max-slot", "0"], "--max-slot must be at least 1, not 0"),
    (["--steps", "1", "--max-slot", "128"], "--max-slot (128) must be less than --seq-len (128)"),
    (["--steps", "1", "--batch-size", "0"], "--batch-size must be at least 1, not 0"),
    (["--steps", "1", "--eval-every", "0"], "--eval-every must be at least 1, not 0"),
    (["--steps", "1", "--save-every", "0"], "--save-every must be at least 1, not 0"),
    (["--steps", "1", "--device", "bogus"], "--device: unknown device 'bogus'"),
    (["--steps", "1", "--lr", "inf"], "--lr must be a number of at least 0, not inf"),
    (["--steps", "1", "--lr", "nan"], "--lr must be a number of at least 0, not nan"),
])
def test_model_refuses_bad_settings_before_any_work(corpus, small_tokenizer_path, tmp_path, capsys, extra, expected):
    out = tmp_path / "model"
    rc = main(run_model(corpus, small_tokenizer_path, out, *extra))
    assert_one_line_error(capsys, rc, expected)
    assert not out.exists()      # refused before the model folder was made


def test_model_refuses_cuda_without_a_gpu(corpus, small_tokenizer_path, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    rc = main(run_model(corpus, small_tokenizer_path, tmp_path / "model", "--steps", "1", "--device", "cuda"))
    assert_one_line_error(capsys, rc, "--device: device 'cuda' asked for, but this torch build sees no CUDA GPU")


def test_model_with_a_missing_or_broken_tokenizer(corpus, tmp_path, capsys):
    rc = main(run_model(corpus, tmp_path / "none.json", tmp_path / "model", "--steps", "1"))
    assert_one_line_error(capsys, rc, f"tokenizer file {tmp_path / 'none.json'} not found")
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": ')
    rc = main(run_model(corpus, broken, tmp_path / "model", "--steps", "1"))
    assert_one_line_error(capsys, rc, f"cannot read the tokenizer {broken}: ")


def test_all_checks_the_model_settings_before_building_the_corpus(tmp_path, capsys):
    work = tmp_path / "work"
    rc = main(["all", "--work", str(work), "--out", str(tmp_path / "model"), "--folder", str(tmp_path),
               "--preset", "tiny-test", "--steps", "0"])
    assert_one_line_error(capsys, rc, "--steps must be at least 1, not 0")
    assert not work.exists()


@pytest.mark.parametrize("value", ["150", "100", "-5"])
def test_corpus_refuses_a_validation_share_outside_0_to_100(tmp_path, capsys, value):
    (tmp_path / "src").mkdir()
    rc = main(["corpus", "--out", str(tmp_path / "corpus"), "--folder", str(tmp_path / "src"),
               "--assume-license", "MIT", "--jobs", "1", "--val-percent", value])
    assert_one_line_error(capsys, rc, f"--val-percent must be at least 0 and below 100 (the share of files kept "
                                      f"for validation; the rest train), not {value}")
    assert not (tmp_path / "corpus").exists()


def test_corpus_and_tokenizer_outputs_that_cannot_be_written(corpus, tmp_path, capsys):
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    (tmp_path / "src").mkdir()
    rc = main(["corpus", "--out", str(a_file), "--folder", str(tmp_path / "src"), "--assume-license", "MIT"])
    assert_one_line_error(capsys, rc, f"corpus folder {a_file} is a file, not a folder")
    rc = main(["tokenizer", "--corpus", str(corpus), "--out", str(tmp_path), "--vocab-size", "300", "--no-count"])
    assert_one_line_error(capsys, rc, f"'{tmp_path}' is a folder, not a file")
    rc = main(["tokenizer", "--corpus", str(corpus), "--out", str(a_file / "tok.json"), "--vocab-size", "300"])
    assert_one_line_error(capsys, rc, f"cannot write {a_file / 'tok.json'}: {a_file} is a file")
    rc = main(["tokenizer", "--corpus", str(corpus), "--out", str(tmp_path / "t.json"), "--sample-mb", "-1"])
    assert_one_line_error(capsys, rc, "--sample-mb must be more than 0, not -1")

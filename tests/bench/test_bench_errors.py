"""The bench modes refuse bad arguments in one line and exit status 1, before their long work:
no traceback, no division by zero, no server started for a model that is not there."""
import subprocess
import sys

import pytest
import torch

from dllm_lsp.bench import block_latency, checkpoint_latency, overhead, startup, training_data
from dllm_lsp.bench import typing as typing_bench


def one_error_line(capsys, prog: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith(f"dllm-lsp bench {prog}: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip().removeprefix(f"dllm-lsp bench {prog}: error: ")


def test_overhead_types_into_a_last_line_without_a_newline_and_refuses_an_empty_file(tiny_model_dir, tmp_path, capsys):
    no_newline = tmp_path / "nul.py"
    no_newline.write_bytes(b"x = 1\x00")      # one line, a NUL byte, no newline at the end
    assert overhead.main(["--file", str(no_newline), "--model", str(tiny_model_dir), "--requests", "16"]) == 0
    capsys.readouterr()
    empty = tmp_path / "empty.py"
    empty.write_text("")
    assert overhead.main(["--file", str(empty), "--model", str(tiny_model_dir)]) == 1
    assert one_error_line(capsys, "overhead") == f"--file {empty} is empty: there is nothing to type into"


@pytest.mark.parametrize("extra, expected", [
    (["--speed", "0"], "--speed must be more than 0 (times faster than a person), not 0"),
    (["--speed", "-1"], "--speed must be more than 0 (times faster than a person), not -1"),
    (["--keystrokes", "0"], "--keystrokes must be at least 1, not 0"),
    (["--clients", "two"], "--clients needs positive counts such as 1,2,4, not 'two'"),
])
def test_typing_refuses_a_bad_speed_keystroke_count_or_client_list(capsys, extra, expected):
    assert typing_bench.main(["--clients", "1", *extra]) == 1
    assert one_error_line(capsys, "typing") == expected


BOGUS = "unknown device 'bogus': use auto, cpu, cuda or cuda:N"
NO_GPU = "device 'cuda' asked for, but this torch build sees no CUDA GPU"
no_gpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")


@pytest.mark.parametrize("device, expected", [("bogus", BOGUS), pytest.param("cuda", NO_GPU, marks=no_gpu_only)])
def test_block_and_checkpoint_refuse_a_device_they_cannot_use(capsys, device, expected):
    assert block_latency.main(["--quick", "--device", device]) == 1
    assert one_error_line(capsys, "block") == expected
    assert checkpoint_latency.main(["--quick", "--device", device]) == 1
    assert one_error_line(capsys, "checkpoint") == expected


@pytest.mark.parametrize("extra, expected", [
    (["--steps", "0"], "--steps must be at least 1, not 0"),
    (["--span", "0"], "--span must be at least 1, not 0"),
    (["--runs", "0"], "--runs must be at least 1, not 0"),
    (["--context", "0"], "--context must be at least 1, not 0"),
    (["--refresh-every", "-1"], "--refresh-every must be at least 0, not -1"),
])
def test_checkpoint_refuses_counts_below_one(capsys, extra, expected):
    assert checkpoint_latency.main(["--quick", "--device", "cpu", *extra]) == 1
    assert one_error_line(capsys, "checkpoint") == expected


def test_startup_checks_the_model_and_device_before_starting_servers(tmp_path, capsys):
    assert startup.main(["--model", str(tmp_path / "none"), "--runs", "1"]) == 1
    assert one_error_line(capsys, "startup").startswith(f"model folder {tmp_path / 'none'} does not exist")
    assert startup.main(["--model", str(tmp_path), "--runs", "1"]) == 1
    assert one_error_line(capsys, "startup") == f"{tmp_path} has no config.json"
    assert startup.main(["--device", "bogus", "--runs", "1"]) == 1
    assert one_error_line(capsys, "startup") == BOGUS


def test_training_data_names_a_missing_or_broken_tokenizer(tmp_path, capsys):
    args = ["--corpus", str(tmp_path / "corpus"), "--preset", "tiny-test", "--rounds", "1", "--batches", "1"]
    assert training_data.main([*args, "--tokenizer", str(tmp_path / "none.json")]) == 1
    assert one_error_line(capsys, "training-data") == (f"tokenizer file {tmp_path / 'none.json'} not found "
                                                       "(build one: dllm-lsp train tokenizer)")
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": ')
    assert training_data.main([*args, "--tokenizer", str(broken)]) == 1
    assert one_error_line(capsys, "training-data").startswith(f"cannot read the tokenizer {broken}: ")
    assert training_data.main([*args, "--tokenizer", str(broken), "--threads", "0"]) == 1
    assert one_error_line(capsys, "training-data") == "--threads must be at least 1, not 0"


def test_kernels_refuses_a_device_it_cannot_use():
    for device, message in (("bogus", "unknown device 'bogus'"), ("meta", "unsupported device meta")):
        proc = subprocess.run([sys.executable, "-m", "dllm_lsp", "bench", "kernels", "--device", device],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr

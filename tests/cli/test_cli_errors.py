"""User errors as a new user meets them (issue 14, "CLI"): the real CLI in a subprocess, one line
on stderr (`dllm-lsp: error: ...`, `dllm-lsp <sub>: error: ...`), exit status 1, never a traceback."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello.py"


def run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dllm_lsp", *args], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def one_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    """The single line on stderr, checked for `words` (and for no traceback)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def cpu(model: Path) -> tuple[str, ...]:
    return ("--model", str(model), "--device", "cpu")


@pytest.mark.parametrize("steps", ["0", "-3"])
def test_complete_steps_out_of_range(tiny_model_dir, steps):
    proc = run("complete", f"{EXAMPLE}:3:12", *cpu(tiny_model_dir), "--steps", steps)
    assert proc.returncode == 1 and proc.stdout == ""
    one_line(proc, "dllm-lsp: error: --steps must be within 1..", f"not {steps}")


def test_bench_runs_zero(tiny_model_dir):
    proc = run("bench", "--runs", "0", *cpu(tiny_model_dir))
    assert proc.returncode == 1
    one_line(proc, "dllm-lsp: error: --runs must be at least 1")
    proc = run("bench", "--also-steps", "8,x", *cpu(tiny_model_dir))
    assert proc.returncode == 1
    one_line(proc, "dllm-lsp: error: --also-steps takes step budgets separated by commas")


def test_bench_overhead_missing_file(tmp_path):
    proc = run("bench", "overhead", "--file", str(tmp_path / "missing.py"))
    assert proc.returncode == 1
    one_line(proc, "dllm-lsp bench overhead: error: cannot read --file", "missing.py", "no such file")


def test_serve_tcp_on_a_port_in_use(tiny_model_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run("serve", "--tcp", f"127.0.0.1:{port}", *cpu(tiny_model_dir), timeout=60)
    assert proc.returncode == 1
    one_line(proc, "dllm-lsp: error: cannot listen on", f"127.0.0.1:{port}", "in use")


def test_serve_log_file_in_a_missing_folder(tmp_path):
    log = tmp_path / "no" / "such" / "folder" / "server.log"
    proc = run("serve", "--log-file", str(log), timeout=60)
    assert proc.returncode == 1
    one_line(proc, "dllm-lsp: error: cannot write the log file", str(log), "no such file")


def test_config_that_does_not_match_the_weights(tiny_model_dir, tmp_path):
    model = tmp_path / "mismatched"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["dim"] = config["dim"] // 2
    (model / "config.json").write_text(json.dumps(config))
    proc = run("complete", f"{EXAMPLE}:3:12", *cpu(model))
    assert proc.returncode == 1 and proc.stdout == ""
    line = one_line(proc, "dllm-lsp: error: could not load", "does not match its weights", "embed.weight", "more")
    assert "size mismatch" not in line   # torch's own text: a line per tensor


def test_weights_claiming_a_huge_extra_tensor_are_refused_before_they_are_read(tiny_model_dir, tmp_path):
    """The file's header is checked against config.json before any tensor is read: a weights file
    claiming a 4 GB tensor more (a sparse file: no disk) was read whole first (1.9 GB of memory)."""
    model = tmp_path / "claims-more"
    shutil.copytree(tiny_model_dir, model)
    weights = model / "model.safetensors"
    data = weights.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    body = data[8 + size:]
    extra = 1 << 30                                   # float32 elements: 4 GiB
    header["extra"] = {"dtype": "F32", "shape": [extra], "data_offsets": [len(body), len(body) + 4 * extra]}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with weights.open("wb") as fh:
        fh.write(len(raw).to_bytes(8, "little") + raw + body)
        fh.truncate(8 + len(raw) + len(body) + 4 * extra)      # sparse: the claimed bytes take no disk
    code = ("import resource, sys\nfrom dllm_lsp.loader import load_model\n"
            "try:\n    load_model(sys.argv[1], 'cpu')\nexcept Exception as exc:\n    print(exc)\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True, timeout=120)
    message, peak_kib = proc.stdout.strip().splitlines()
    assert "extra in the weights is not in the model" in message, proc.stdout + proc.stderr
    assert int(peak_kib) < 1_500_000, peak_kib      # far from the 4 GiB it claims


def test_config_with_more_layers_than_the_weights(tiny_model_dir, tmp_path):
    model = tmp_path / "deeper"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["n_layers"] += 1
    (model / "config.json").write_text(json.dumps(config))
    proc = run("complete", f"{EXAMPLE}:3:12", *cpu(model))
    assert proc.returncode == 1
    one_line(proc, "dllm-lsp: error:", "does not match its weights", f"layers.{config['n_layers'] - 1}.",
             "missing from the weights", "more")


def test_unknown_model_lists_the_shipped_ones():
    from dllm_lsp.loader import shipped_model_names

    names = shipped_model_names()
    assert names, "a model is shipped in models/"
    proc = run("complete", f"{EXAMPLE}:3:12", "--model", "UNKNOWN", "--device", "cpu")
    assert proc.returncode == 1
    one_line(proc, "dllm-lsp: error:", "UNKNOWN", "shipped models:", *names)


def test_unknown_language_falls_back_to_line_rules(tiny_model_dir):
    proc = run("complete", f"{EXAMPLE}:3:12", *cpu(tiny_model_dir), "--language", "cobol")
    assert proc.returncode == 0
    one_line(proc, "dllm-lsp: warning:", "'cobol'", "line rules")
    assert proc.stdout.strip()   # still a completion


def test_nothing_to_complete_says_why_and_prints_nothing(tiny_model_dir, tmp_path):
    empty = tmp_path / "empty.py"
    empty.write_text("")
    proc = run("complete", f"{empty}:1:1", *cpu(tiny_model_dir))
    assert proc.returncode == 0 and proc.stdout == ""
    one_line(proc, "dllm-lsp: no completion: nothing to complete here")
    as_json = run("complete", f"{empty}:1:1", *cpu(tiny_model_dir), "--json")
    assert as_json.returncode == 0 and as_json.stderr == ""
    reply = json.loads(as_json.stdout)
    assert reply["completion"] == "" and "nothing to complete" in reply["reason"]
    assert reply["model_text"].strip() == ""                 # the model wrote nothing here


def test_a_refused_guess_comes_with_the_model_text_in_json(tiny_model_dir):
    as_json = run("complete", f"{EXAMPLE}:1:1", *cpu(tiny_model_dir), "--json")
    reply = json.loads(as_json.stdout)
    assert reply["completion"] == "" and "did not parse" in reply["reason"]
    assert reply["model_text"].strip()                        # what was refused, for the user to see


def test_a_guess_that_does_not_parse_says_so(tiny_model_dir):
    # The tiny (seeded) model's guess before `def rectangle_area(...)` is not Python.
    proc = run("complete", f"{EXAMPLE}:1:1", *cpu(tiny_model_dir))
    assert proc.returncode == 0 and proc.stdout == ""
    one_line(proc, "dllm-lsp: no completion:", "did not parse")


def test_eval_user_error_exits_1_with_the_prefix(tiny_model_dir, tmp_path):
    proc = run("eval", "humaneval-infilling", "--data", str(tmp_path / "none.jsonl"), *cpu(tiny_model_dir))
    assert proc.returncode == 1
    one_line(proc, "dllm-lsp eval: error:", "does not exist")


def test_train_user_error_exits_1_with_the_prefix(tmp_path):
    proc = run("train", "corpus", "--out", str(tmp_path / "c"), "--folder", str(tmp_path / "missing"))
    assert proc.returncode == 1
    one_line(proc, "dllm-lsp train: error:", "does not exist")


def test_gpujob_user_error_has_the_prefix(tmp_path):
    proc = run("gpujob", "unpack", str(tmp_path), "--repo", str(tmp_path))
    assert proc.returncode == 1
    one_line(proc, "dllm-lsp gpujob: error:", "not a GPU job pack")


def test_argparse_usage_errors_keep_status_2():
    proc = run("complete")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "usage: dllm-lsp complete" in proc.stderr


@pytest.mark.parametrize("slack", ["0.5", "nan"])
def test_serve_step_slack_below_one(slack):
    proc = run("serve", "--step-slack", slack, timeout=60)
    assert proc.returncode == 1
    one_line(proc, "dllm-lsp: error: --step-slack must be at least 1", f"not {slack}")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_more_threads_than_the_machine_can_use_are_refused(tiny_model_dir, how):
    # 100000 segfaulted torch's pool (32768 hung it), starving the machine of threads meanwhile
    if how == "flag":
        proc = run("complete", f"{EXAMPLE}:3:12", *cpu(tiny_model_dir), "--threads", "100000")
    else:
        proc = subprocess.run([sys.executable, "-m", "dllm_lsp", "complete", f"{EXAMPLE}:3:12", *cpu(tiny_model_dir)],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "DLLM_LSP_THREADS": "100000"})
    assert proc.returncode == 1 and proc.stdout == ""
    one_line(proc, "dllm-lsp: error: --threads 100000 is more than this machine can use: at most")


def test_a_closed_stdout_is_no_traceback(tiny_model_dir):
    proc = subprocess.Popen([sys.executable, "-m", "dllm_lsp", "complete", f"{EXAMPLE}:3:12", *cpu(tiny_model_dir),
                             "--json"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                                   # `| head -c0`
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err, err.decode()

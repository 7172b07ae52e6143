"""An eval stopped mid-run (SIGTERM, as a job scheduler or `timeout` sends) says it wrote nothing and
leaves the --out result already there as it was; a result is replaced whole or not at all."""
import json
import os
import signal
import subprocess
import sys

from dllm_lsp.eval.results import read_result, write_result

TASK = {"task_id": "T/0", "prompt": "a = ", "suffix": "\n", "canonical_solution": "1",
        "test": "def check(f):\n    pass\n", "entry_point": "a"}


def test_sigterm_mid_run_writes_nothing_and_says_so(tiny_model_dir, tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({**TASK, "task_id": f"T/{i}"}) + "\n" for i in range(5000)))
    out = tmp_path / "result.json"
    write_result(out, {"pass@1": 0.5, "modes": {"oracle": {"mode": "oracle", "samples": [{"task_id": "old"}]}}})
    before = read_result(out)
    proc = subprocess.Popen([sys.executable, "-m", "dllm_lsp.cli", "eval", "humaneval-infilling", "--data", str(data),
                             "--model", str(tiny_model_dir), "--modes", "oracle", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stderr:          # the progress line: past the model's load, infilling
            if "oracle: 100/5000 infilled" in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == f"dllm-lsp eval: interrupted: no results written; {out} left as it was", err
    assert "Traceback" not in err and rest == ""
    assert read_result(out) == before
    assert sorted(os.listdir(tmp_path)) == ["result.json", "result.samples.json.xz", "tasks.jsonl"]


def test_a_result_that_cannot_be_written_whole_leaves_the_last_one(tmp_path):
    """The figures' JSON was written first: when its samples then failed to write, it named
    samples that were not its own."""
    out = tmp_path / "r.json"
    old = {"pass@1": 0.25, "modes": {"unknown": {"mode": "unknown", "samples": [{"task_id": "old"}]}}}
    write_result(out, old)
    (tmp_path / "r.samples.json.xz").unlink()
    (tmp_path / "r.samples.json.xz").mkdir()      # the samples cannot be written now
    try:
        write_result(out, {"pass@1": 0.75, "modes": {"unknown": {"mode": "unknown", "samples": [{"task_id": "new"}]}}})
    except OSError:
        pass
    else:
        raise AssertionError("a samples file that cannot be written must fail the write")
    assert json.loads(out.read_text())["pass@1"] == 0.25
    assert sorted(os.listdir(tmp_path)) == ["r.json", "r.samples.json.xz"]     # no temporary file left


def test_a_result_keeps_a_plain_files_permissions(tmp_path):
    out = tmp_path / "r.json"
    write_result(out, {"pass@1": 1.0, "modes": {}})
    mask = os.umask(0)
    os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~mask

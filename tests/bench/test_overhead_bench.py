"""`dllm-lsp bench overhead` with other documents open: each count timed in one run, in the JSON."""
import json
import subprocess
import sys

from dllm_lsp.options import Options


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dllm_lsp", "bench", "overhead", *args], capture_output=True,
                          text=True, timeout=300)


def test_open_documents_are_timed_side_by_side(tiny_model_dir, tmp_path):
    out = tmp_path / "overhead.json"
    proc = run("--model", str(tiny_model_dir), "--requests", "16", "--open-documents", "0,70", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "70 other documents open:" in proc.stdout
    report = json.loads(out.read_text())
    assert report["settings"]["open_documents"] == [0, 70]
    # The options it planned with (every option, as a client sends them): the server's defaults.
    assert report["settings"]["options"] == Options().wire() and report["settings"]["options"]["companionEdits"] is False
    assert set(report["by_open_documents"]) == {"0", "70"}
    for figures in report["by_open_documents"].values():
        assert figures["plan"]["samples"] == 16 and figures["request_overhead"]["p50_ms"] > 0
    assert report["figures"] == report["by_open_documents"]["0"]


def test_bad_open_documents_are_refused_in_one_line(tiny_model_dir):
    proc = run("--model", str(tiny_model_dir), "--open-documents", "ten")
    assert proc.returncode == 1 and "--open-documents" in proc.stderr and "Traceback" not in proc.stderr

"""`dllm-lsp bench batching` on a tiny model: a shared step of k requests against their k steps
in turn, with the figures a reader needs (both medians, the gain) in the JSON."""
import json
import subprocess
import sys

from dllm_lsp.bench.batching import main


def test_shared_step_against_steps_in_turn(tiny_model_dir, tmp_path):
    out = tmp_path / "batching.json"
    assert main(["--model", str(tiny_model_dir), "--device", "cpu", "--requests", "1,3", "--runs", "3",
                 "--span-tokens", "8", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["settings"]["batched_forward"] is True       # the embedded model has one
    assert [case["requests"] for case in report["cases"]] == [1, 3]
    for case in report["cases"]:
        shared, in_turn = case["shared_step"]["p50_ms"], case["steps_in_turn"]["p50_ms"]
        assert shared > 0 and in_turn > 0
        assert case["throughput_gain"] == round(in_turn / shared, 3)
    assert report["environment"]["device"] == "cpu" and report["model"]["family"] == "embedded"
    # Fresh requests' first step: contexts in the shared pass against a context pass each.
    assert [case["requests"] for case in report["first_steps"]] == [1, 3]
    for case in report["first_steps"]:
        merged, own = case["contexts_in_the_step"]["p50_ms"], case["context_passes_then_step"]["p50_ms"]
        assert case["context_tokens"] > 0 and case["gain"] == round(own / merged, 3)


def test_bad_counts_are_one_line_errors(tiny_model_dir):
    done = subprocess.run([sys.executable, "-m", "dllm_lsp", "bench", "batching", "--model", str(tiny_model_dir),
                           "--requests", "two"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "dllm-lsp bench batching: error: --requests must be comma-separated counts, not 'two'"]

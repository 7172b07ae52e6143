"""`dllm-lsp bench batching` on a tiny model: a shared step of k requests against their k steps
in turn, with the figures a reader needs (both medians, the gain) in the JSON."""
import json
import statistics
import subprocess
import sys

from dllm_lsp.bench.batching import main, requests_at_spots, step_cost_fits
from dllm_lsp.bench.latency import return_tail
from dllm_lsp.bench.overhead import synthetic_python


def test_shared_step_against_steps_in_turn(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "batching.json"
    assert main(["--model", str(tiny_model_dir), "--device", "cpu", "--requests", "1,3", "--runs", "3",
                 "--span-tokens", "8", "--out", str(out), "--json"]) == 0
    report = json.loads(out.read_text())
    printed, progress = capsys.readouterr()
    assert json.loads(printed) == report                  # --json: stdout is the JSON, progress on stderr
    assert "3 request(s): shared step p50" in progress
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
    # The scheduler's step-cost model fitted to those medians, rows split and counted as one.
    fits = report["step_cost"]
    split, merged = fits["span_and_context_rows"], fits["one_count_of_rows"]
    measured = ([c["shared_step"]["p50_ms"] for c in report["cases"]]
                + [c["contexts_in_the_step"]["p50_ms"] for c in report["first_steps"]])
    assert [s["measured_ms"] for s in split["steps"]] == [round(m, 2) for m in measured]
    assert [s["context_rows"] for s in split["steps"]] == [0, 0] + [c["context_tokens"] for c in report["first_steps"]]
    for step in split["steps"]:
        want = split["fixed_ms"] + split["per_row_ms"] * step["span_rows"] + split["per_context_row_ms"] * step["context_rows"]
        # (the JSON rounds the coefficients to 0.0001 ms: up to 0.00005 ms a row)
        assert abs(step["predicted_ms"] - want) < 0.01 + 1e-4 * (step["span_rows"] + step["context_rows"])
    assert merged["per_row_ms"] == merged["per_context_row_ms"]      # one count: one coefficient
    for fit in (split, merged):
        assert 0 <= fit["median_error"] <= fit["max_error"]


def test_bad_counts_are_one_line_errors(tiny_model_dir):
    done = subprocess.run([sys.executable, "-m", "dllm_lsp", "bench", "batching", "--model", str(tiny_model_dir),
                           "--requests", "two"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "dllm-lsp bench batching: error: --requests must be comma-separated counts, not 'two'"]


def test_more_requests_than_the_400_line_module_has_spots():
    """About 30 spots in the 400-line module: 32 requests ran out of them (ValueError)."""
    requests = requests_at_spots(64, 8)
    assert len(requests) == 64 and len({r.prefix for r in requests}) == 64
    # Up to the 400-line module's count, the spots (and so the figures) are those measured so far.
    text = synthetic_python(400)
    at = len(text) // 4
    for request in requests_at_spots(8, 8):
        prefix, suffix, cut = return_tail(text, at)
        assert (request.prefix, request.suffix) == (prefix, suffix)
        at = cut + 1


def test_the_step_cost_error_is_the_median_of_an_even_count():
    cases = [{"rows": 32, "shared_step": {"p50_ms": 10.0}}, {"rows": 64, "shared_step": {"p50_ms": 30.0}}]
    first = [{"requests": 1, "context_tokens": 100, "contexts_in_the_step": {"p50_ms": 15.0}},
             {"requests": 2, "context_tokens": 300, "contexts_in_the_step": {"p50_ms": 60.0}}]
    for fit in step_cost_fits(cases, first, span_tokens=32).values():
        errors = sorted(abs(s["predicted_ms"] - s["measured_ms"]) / s["measured_ms"] for s in fit["steps"])
        assert len(errors) == 4 and abs(fit["median_error"] - statistics.median(errors)) < 2e-3


def test_one_request_count_is_too_few_steps_to_fit_the_step_cost():
    cases = [{"rows": 32, "shared_step": {"p50_ms": 10.0}}]
    first = [{"requests": 1, "context_tokens": 100, "contexts_in_the_step": {"p50_ms": 15.0}}]
    assert step_cost_fits(cases, first, span_tokens=32) is None

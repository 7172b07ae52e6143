"""`dllm-lsp bench startup` on a tiny model: the real server started over stdio with and without
the load's warm-up, a completion asked right after `initialized`, then five more."""
import json

from dllm_lsp.bench.startup import POSITIONS, SOURCE, main


def test_positions_are_at_the_end_of_each_open_return():
    lines = SOURCE.splitlines()
    for line, character in POSITIONS:
        assert lines[line] == "    return " and character == len(lines[line])


def test_startup_bench_compares_the_warm_up_with_none(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "startup.json"
    assert main(["--model", str(tiny_model_dir), "--device", "cpu", "--runs", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    warm, cold = result["variants"]["warm-up"], result["variants"]["no-warm-up"]
    for v in (warm, cold):
        assert v["runs"] == 1 and v["requests"] == len(POSITIONS) and 0 <= v["answered"] <= v["requests"]
        assert v["first_answer_ms"]["p50_ms"] > 0 and v["later_completion_ms"]["samples"] == len(POSITIONS) - 1
    prepared = warm["prepared"][0]
    assert prepared["warmupMs"] > 0 and prepared["probeSteps"] > 0 and cold["prepared"] == [None]
    assert result["first_completion_ratio"] > 0 and result["settings"]["variants"]["no-warm-up"] == ["--no-warm-up"]
    assert result["environment"]["device"] == "cpu"
    assert "first completion" in capsys.readouterr().out


def test_startup_bench_refuses_no_runs(capsys):
    assert main(["--runs", "0"]) == 1 and "--runs must be at least 1" in capsys.readouterr().err

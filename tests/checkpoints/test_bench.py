"""`dllm-lsp bench checkpoint --quick`: the GPU benchmark's code path, on the CPU with a tiny shape."""
import json

import pytest
import torch

from dllm_lsp.bench.checkpoint_latency import (TINY, GraphedAutoregressive, autoregressive_decode, guarded, main,
                                              random_model)


def ratio_of_rounded(numerator: float, denominator: float):
    """What a ratio computed from two unrounded times, each then written rounded to 3 decimals,
    may be against the ratio of the written ones: each time off by up to 0.0005 ms (a 0.2 ms CPU
    step then moves the ratio by 0.25%), the ratio itself rounded to 3 decimals too."""
    ratio = numerator / denominator
    return pytest.approx(ratio, abs=ratio * (0.0005 / numerator + 0.0005 / denominator) + 0.0005 + 1e-9)


def test_quick_bench_writes_its_figures(tmp_path, capsys):
    out = tmp_path / "figures.json"
    assert main(["--quick", "--device", "cpu", "--json", "--out", str(out), "--runs", "1"]) == 0
    figures = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == figures
    assert figures["settings"] == {"context_tokens": 64, "span_tokens": 8, "steps": 4, "runs": 1,
                                   "tokens_per_step": 2, "refresh_every": 0}
    # Fixed steps: every mode runs all 4; the dual cache does one full pass, the uncached path four.
    assert figures["passes"]["dual"]["steps"] == 4 and figures["passes"]["dual"]["full_passes"] == 1
    assert figures["passes"]["none"]["steps"] == 4 and figures["passes"]["none"]["full_passes"] == 4
    for value in figures["completion_ms"].values():
        assert value > 0
    assert figures["weight_read_bound"]["bound_ms"] > 0
    assert figures["targets"]["meaningful"] is False          # CPU + tiny shape: not the GPU figures
    # The shared step of 1 to 16 requests (the scheduler's most) against their steps in turn.
    assert [r["requests"] for r in figures["shared_step"]] == [1, 2, 4, 8, 16]
    for row in figures["shared_step"]:
        assert row["shared_step_ms"] > 0 and row["steps_in_turn_ms"] > 0
        assert row["throughput_gain"] == ratio_of_rounded(row["steps_in_turn_ms"], row["shared_step_ms"])
    assert isinstance(figures["targets"]["met_shared_step_gain"], bool)
    # k keystrokes with their contexts kept: every one reuses, first passes shared against in turn.
    assert [r["requests"] for r in figures["shared_keystrokes"]] == [1, 2, 4, 8, 16]
    for row in figures["shared_keystrokes"]:
        assert row["reusing"] == row["requests"]
        assert row["throughput_gain"] == ratio_of_rounded(row["first_passes_in_turn_ms"], row["shared_first_passes_ms"])
    # The keystroke after, with the context kept: all of it but the typed token and the one before.
    reuse = figures["context_reuse_after_typing"]
    assert reuse["context_tokens"] - 2 <= reuse["reused_tokens"] < reuse["context_tokens"]
    assert reuse["completion_reusing_context_ms"] > 0 and reuse["completion_dual_cache_ms"] > 0


def test_shared_counts_are_checked_and_can_be_skipped(tmp_path, capsys):
    out = tmp_path / "figures.json"
    assert main(["--quick", "--device", "cpu", "--out", str(out), "--runs", "1", "--shared", ""]) == 0
    figures = json.loads(out.read_text())
    assert figures["shared_step"] == [] and figures["targets"]["met_shared_step_gain"] is None
    with pytest.raises(SystemExit):
        main(["--quick", "--shared", "2,x"])
    assert "--shared must be comma-separated" in capsys.readouterr().err


def test_profile_says_where_a_cached_step_and_an_ar_token_go(tmp_path):
    out = tmp_path / "figures.json"
    assert main(["--quick", "--device", "cpu", "--out", str(out), "--runs", "1", "--shared", "", "--profile"]) == 0
    profile = json.loads(out.read_text())["profile"]
    assert set(profile) == {"cached_step", "autoregressive_prefill_and_one_token", "autoregressive_prefill"}
    for found in profile.values():
        assert found["wall_ms_per_call"] > 0 and found["ops_per_call"] > 0 and found["host_top"]
    # A second token costs a second forward pass of torch ops beside the prefill.
    assert profile["autoregressive_prefill_and_one_token"]["ops_per_call"] > profile["autoregressive_prefill"]["ops_per_call"]


def test_autoregressive_baseline_matches_a_causal_full_pass():
    """The baseline's KV-cached decode computes what a causal model would: greedy tokens agree."""
    model = random_model(TINY, torch.device("cpu"), torch.float32)
    context = torch.randint(0, 1000, (20,))
    tokens = autoregressive_decode(model, context, 5)[0]
    seq = context.clone()
    for _ in range(5):
        cos, sin = model.cos_sin(torch.arange(seq.numel()))
        h = model._embed(seq[None])
        for layer in model.layers:
            q, k, v = layer.attn.qkv(layer.attn_norm(h), cos, sin)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            h = h + layer.attn.out(y)
            h = h + layer.mlp(layer.mlp_norm(h))
        seq = torch.cat([seq, model.head(h[:, -1]).argmax(-1)])
    assert tokens.tolist() == seq[20:].tolist()


def test_a_failed_measurement_is_recorded_and_the_rest_kept(capsys):
    """On a GPU the newer measurements never ran on, one that raises leaves the others' JSON."""
    errors: dict[str, str] = {}

    def out_of_memory():
        raise RuntimeError("CUDA out of memory")

    assert guarded("shared_step", errors, [], out_of_memory) == []
    assert guarded("context_reuse_after_typing", errors, None, lambda: {"speedup": 2.0}) == {"speedup": 2.0}
    assert errors == {"shared_step": "RuntimeError: CUDA out of memory"}
    assert "CUDA out of memory" in capsys.readouterr().err


def test_cuda_graph_figures_sit_beside_the_eager_ones(tmp_path):
    # On a CPU `--cuda-graphs` runs the replay bookkeeping eagerly: the code path, and the checks
    # that a replayed step and a static-shape autoregressive token give what the eager ones give.
    out = tmp_path / "figures.json"
    assert main(["--quick", "--device", "cpu", "--out", str(out), "--runs", "1", "--shared", "1,2",
                 "--cuda-graphs", "--profile"]) == 0
    figures = json.loads(out.read_text())
    assert "errors" not in figures
    graphed = figures["cuda_graphs"]
    assert graphed["same_completion"] is True and graphed["same_autoregressive_tokens"] is True
    assert graphed["cached_step_greedy_agree"] == 1.0
    for key in ("completion_dual_cache_ms", "completion_dual_cache_eager_ms", "cached_step_ms", "autoregressive_ms"):
        assert graphed[key] > 0
    assert graphed["dual_vs_autoregressive"] == pytest.approx(
        graphed["autoregressive_ms"] / graphed["completion_dual_cache_ms"], rel=2e-3)
    assert set(graphed["profile"]) == {"cached_step", "autoregressive_prefill_and_one_token"}
    assert [r["requests"] for r in figures["shared_step_cuda_graphs"]] == [1, 2]
    # Each target from each side's faster form.
    assert figures["targets"]["best_cached_step_over_bound"] == pytest.approx(
        min(figures["weight_read_bound"]["cached_step_over_bound"], graphed["cached_step_over_bound"]), rel=2e-3)
    assert figures["targets"]["judged_from"].startswith("each side's faster form")
    best_ar = min(figures["completion_ms"]["autoregressive_kv_cache"], graphed["autoregressive_ms"])
    assert figures["speedup"]["ceiling_steps_free"] == pytest.approx(best_ar / figures["parts_ms"]["full_pass"], rel=2e-3)


def test_without_cuda_graphs_a_cpu_run_says_so(tmp_path):
    out = tmp_path / "figures.json"
    assert main(["--quick", "--device", "cpu", "--out", str(out), "--runs", "1", "--shared", ""]) == 0
    figures = json.loads(out.read_text())
    assert figures["cuda_graphs"] is None and figures["shared_step_cuda_graphs"] is None
    assert figures["targets"]["judged_from"] == "eager"


def test_the_graphed_autoregressive_decode_gives_the_eager_tokens_and_refuses_an_overflow():
    model = random_model(TINY, torch.device("cpu"), torch.float32)
    context = torch.randint(0, 1000, (20,))
    decoder = GraphedAutoregressive(model, 30)
    want = autoregressive_decode(model, context, 6)
    assert torch.equal(decoder.decode(context, 6), want)
    assert torch.equal(decoder.decode(context[:15], 6), autoregressive_decode(model, context[:15], 6))  # kept, reused
    with pytest.raises(ValueError, match="do not fit"):
        decoder.decode(context, 11)

"""`dllm-lsp bench block --quick`: the block-diffusion vs autoregressive benchmark's code path and JSON."""
import json

import torch

from dllm_lsp.bench.block_latency import TINY, autoregressive, main
from dllm_lsp.checkpoints.block_denoiser import random_block_denoiser
from dllm_lsp.checkpoints.block_model import block_causal_mask


def test_quick_run_writes_every_figure(tmp_path):
    out = tmp_path / "block.json"
    assert main(["--quick", "--device", "cpu", "--runs", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["diffusion"]) == {"block4_steps1", "block4_steps2", "block4_steps4"}
    for row in result["diffusion"].values():
        assert row["median_ms"] > 0 and row["tokens"] == 32 and row["speedup_vs_autoregressive"] > 0
    # Fixed steps per block: 1, 2 or 4 per block of 4 (the FIM tokens shift the first block boundary,
    # so the span starts in a partial block): about 8, 16 and exactly 32 denoising steps.
    steps = [result["diffusion"][k]["denoising_steps"] for k in ("block4_steps1", "block4_steps2", "block4_steps4")]
    assert 8 <= steps[0] <= 9 and 16 <= steps[1] <= 17 and steps[2] == 32
    assert result["autoregressive"]["forward_passes"] == 33 and result["meaningful"] is False
    # The context joins the cache in the first pass, a finished block in the next block's: one pass per step.
    assert all(row["forward_passes"] == row["denoising_steps"] for row in result["diffusion"].values())
    shared = result["shared_step"]
    assert [row["requests"] for row in shared] == [1, 2, 4, 8, 16] and "errors" not in result
    for row in shared:
        assert row["shared_step_ms"] > 0 and row["steps_in_turn_ms"] > 0 and row["throughput_gain"] > 0


def test_the_autoregressive_baseline_is_a_real_greedy_decode():
    port = random_block_denoiser(TINY, "cpu", torch.float32)
    context = torch.randint(0, 200, (20,), generator=torch.Generator().manual_seed(1))
    tokens = autoregressive(port, context, 6)
    # The same tokens from full causal passes over the growing sequence (no cache).
    seq = context.tolist()
    for _ in range(6):
        ids = torch.tensor([seq])
        pos = torch.arange(len(seq))
        hidden, _ = port.model(ids, pos, None, block_causal_mask(pos, pos, 1))
        seq.append(int(port.model.head(hidden[:, -1]).argmax(-1)))
    assert tokens[0].tolist() == seq[20:]


def test_bad_arguments_are_one_line(capsys):
    assert main(["--quick", "--device", "cpu", "--span", "0"]) == 1
    assert "must be positive" in capsys.readouterr().err
    assert main(["--quick", "--device", "cpu", "--shared", "2,x"]) == 1
    assert "--shared takes positive request counts" in capsys.readouterr().err

"""`dllm-lsp bench block`: block-diffusion completion latency against an autoregressive decode of
the same weights, at equal tokens.

A randomly initialised model of SDAR-8B's shape (Qwen3-8B layers: 36 x 4096, GQA 32/8, qk-norm,
vocabulary 151936) in bf16 fills a 32-token span after a 2,048-token context, block by block
(blocks of 4, `engine.blockwise.decode_blockwise`, each finished block joining the exact KV
cache in the next block's first pass) with a fixed number of denoising steps per block (1, 2 and 4: 4, 2 and 1 tokens per
pass), against the same weights decoding the same 32 tokens left to right (a causal prefill,
then one token per pass with a KV cache). Random weights time like trained ones; quality needs
the real checkpoints (docs/models.md).

`shared_step`: 1, 2, 4, 8, 16 requests, each with its own cached context, take one block step
together (`BlockDenoiser.batch_logits`, what the step scheduler runs for concurrent requests)
against their block steps in turn: the throughput concurrent users of one block model gain.

    dllm-lsp bench block [--device cuda] [--context 2048] [--span 32] [--runs 5] [--shared 1,2,4,8,16]
                         [--out FILE] [--quick]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import torch

from dllm_lsp.checkpoints.block_denoiser import SDAR_8B_SHAPE, random_block_denoiser
from dllm_lsp.checkpoints.block_model import BlockConfig, BlockLM, block_causal_mask
from dllm_lsp.cli_errors import output_file, report as report_error, write_out
from dllm_lsp.engine.blockwise import decode_blockwise
from dllm_lsp.engine.denoiser import BlockStep, Canvas
from dllm_lsp.loader import ModelLoadError, resolve_device

from .checkpoint_latency import fixed_steps, guarded, shared_against_in_turn, timed
from .environment import environment
from .memory import weights_too_big

TINY = BlockConfig(vocab_size=1024, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, ffn_dim=128,
                   rope_theta=10000.0, norm_eps=1e-6, qk_norm=True)
STEPS_PER_BLOCK = (1, 2, 4)


def median_ms(fn, device: torch.device, runs: int) -> float:
    return statistics.median(timed(fn, device, runs))


@torch.no_grad()
def autoregressive(port, context: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy left to right on the port's weights: one causal prefill, then one token per pass."""
    model, device = port.model, port.device
    ids = context[None].to(device)
    positions = torch.arange(ids.shape[1], device=device)
    hidden, kv = model(ids, positions, None, block_causal_mask(positions, positions, 1))
    out = []
    token = model.head(hidden[:, -1:]).float().argmax(-1)
    for i in range(new_tokens):
        out.append(token)
        pos = torch.tensor([ids.shape[1] + i], device=device)
        hidden, new = model(token, pos, kv, None)
        kv = [(torch.cat([k0, k1], 2), torch.cat([v0, v1], 2)) for (k0, v0), (k1, v1) in zip(kv, new)]
        token = model.head(hidden[:, -1:]).float().argmax(-1)
    return torch.cat(out, 1)


def shared_block_steps(port, context: int, counts: list[int], runs: int) -> list[dict]:
    """One block step of k requests shared (`batch_logits`) against their k block steps in turn;
    each request has its own `context` tokens cached (the step leaves the caches as they are)."""
    device, bs = port.device, port.block_size
    steps, blocks = [], []
    for seed in range(max(counts, default=0)):
        g = torch.Generator().manual_seed(seed + 1)
        ctx = torch.randint(0, port.vocab_limit - 8, (1, context // bs * bs), generator=g)
        cache = port.new_cache(1)
        port.prefill(cache, ctx, 0)
        steps.append(BlockStep(port, cache, cache.length))
        blocks.append(torch.full((1, bs), port.special.mask_id, device=device))
    return shared_against_in_turn(port, steps, blocks, counts, runs)


def run(device: torch.device, cfg: BlockConfig, context: int, span: int, runs: int,
        shared: list[int] = ()) -> dict:
    port = random_block_denoiser(cfg, device, torch.bfloat16 if device.type == "cuda" else torch.float32)
    g = torch.Generator().manual_seed(0)
    ctx = torch.randint(0, port.vocab_limit - 8, (context,), generator=g)
    canvas = Canvas(torch.cat([ctx, torch.full((span,), port.special.mask_id)]), [(context, context + span)])
    rows = {}
    for steps in STEPS_PER_BLOCK:
        if steps > port.block_size:
            continue
        settings = fixed_steps(steps)
        outcome = decode_blockwise(port, canvas, settings)
        rows[f"block{port.block_size}_steps{steps}"] = {
            "median_ms": round(median_ms(lambda s=settings: decode_blockwise(port, canvas, s), device, runs), 3),
            # One pass per step: the context rides along in the first, each finished block in the next block's.
            "denoising_steps": outcome.steps, "forward_passes": outcome.steps, "tokens": span}
    ar_ms = median_ms(lambda: autoregressive(port, ctx, span), device, runs)
    for row in rows.values():
        row["speedup_vs_autoregressive"] = round(ar_ms / row["median_ms"], 3)
    params = sum(p.numel() for p in port.model.parameters())
    errors: dict[str, str] = {}
    shared_rows = guarded("shared_step", errors, [], lambda: shared_block_steps(port, context, list(shared), runs * 2))
    figures = {"diffusion": rows, "autoregressive": {"median_ms": round(ar_ms, 3), "forward_passes": span + 1,
                                                      "tokens": span},
               "shared_step": shared_rows, "parameters": params}
    if errors:
        figures["errors"] = errors
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dllm-lsp bench block", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--context", type=int, default=None, help="context tokens (default 2048; 48 with --quick)")
    p.add_argument("--span", type=int, default=32)
    p.add_argument("--runs", type=int, default=None, help="timed repetitions (default 5; 2 with --quick)")
    p.add_argument("--shared", default="1,2,4,8,16",
                   help="request counts for the shared block step (comma-separated; '' to skip)")
    p.add_argument("--quick", action="store_true", help="a tiny shape: checks the code path (CPU)")
    p.add_argument("--out", type=output_file, default=None)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        device = resolve_device(a.device)
    except ModelLoadError as exc:
        return report_error("dllm-lsp bench block", exc)
    if a.span < 1 or (a.context is not None and a.context < 1) or (a.runs is not None and a.runs < 1):
        print("dllm-lsp bench block: error: --span, --context and --runs must be positive", file=sys.stderr)
        return 1
    try:
        shared = [int(n) for n in a.shared.split(",") if n.strip()]
    except ValueError:
        shared = [0]
    if any(n < 1 for n in shared):
        print("dllm-lsp bench block: error: --shared takes positive request counts, e.g. 1,2,4,8", file=sys.stderr)
        return 1
    cfg = TINY if a.quick else SDAR_8B_SHAPE
    context = a.context or (48 if a.quick else 2048)
    runs = a.runs or (2 if a.quick else 5)
    too_big = weights_too_big(lambda: BlockLM(cfg), torch.bfloat16 if device.type == "cuda" else torch.float32, device)
    if too_big:
        print(f"dllm-lsp bench block: error: the SDAR-8B-shaped model cannot be built here: {too_big}", file=sys.stderr)
        return 1
    figures = run(device, cfg, context, a.span, runs, shared)
    result = {
        "benchmark": "block-diffusion infill vs autoregressive decode, same random weights, equal tokens",
        "shape": "tiny (quick)" if a.quick else "SDAR-8B (Qwen3-8B layers), random bf16 weights",
        "settings": {"context": context, "span": a.span, "runs": runs, "block_size": 4,
                     "steps_per_block": list(STEPS_PER_BLOCK), "shared": shared},
        "environment": environment(str(device)),
        **figures,
        "meaningful": device.type == "cuda" and not a.quick,
    }
    text = json.dumps(result, indent=1)
    if a.out:
        write_out(a.out, text + "\n", "dllm-lsp bench block")
    if a.json or not a.out:
        print(text)
    return 0

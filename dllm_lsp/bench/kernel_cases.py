"""Per-kernel timings: each Triton kernel against the torch path it replaces, on the same inputs.

Every case records the shape, both medians, the speedup and the largest difference between
the two outputs (a benchmark of a wrong kernel is worthless). On CUDA the medians come from
`triton.testing.do_bench` (L2 flushed between repetitions); on CPU from a wall clock, and the
Triton side runs in the interpreter, so CPU figures exercise the code path and nothing more.
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from dllm_lsp.arch.layers import Rotary
from dllm_lsp.kernels import rmsnorm, rope, span_attention, unmask_select
from dllm_lsp.kernels.dispatch import interpreting, triton_available

# Attention heads of the two models the project cares about.
HEADS = {
    "embedded": dict(n_heads=8, n_kv_heads=4, head_dim=64),     # the "gpu-30m" training preset
    "dream-7b": dict(n_heads=28, n_kv_heads=4, head_dim=128),   # Qwen2.5-7B layers
}
MODEL_DIMS = {"embedded": 512, "dream-7b": 3584}


@dataclass
class Grid:
    span_lengths: tuple[int, ...]
    contexts: tuple[int, ...]
    heads: tuple[str, ...]
    select_rows: tuple[int, ...]
    vocabs: tuple[int, ...]
    select_dtypes: tuple[torch.dtype, ...]
    dtype: torch.dtype


FULL_GRID = Grid(
    span_lengths=(8, 32, 128), contexts=(512, 2048, 8192), heads=("embedded", "dream-7b"),
    select_rows=(8, 32, 128), vocabs=(16384, 152064), select_dtypes=(torch.float32, torch.bfloat16),
    dtype=torch.bfloat16,
)
QUICK_GRID = Grid(
    span_lengths=(4,), contexts=(40,), heads=("embedded",), select_rows=(3,), vocabs=(1000,),
    select_dtypes=(torch.float32,), dtype=torch.float32,
)
QUICK_HEADS = {"embedded": dict(n_heads=4, n_kv_heads=2, head_dim=16)}   # interpreter-sized


def median_ms(fn: Callable[[], object], device: torch.device, quick: bool) -> float:
    if device.type == "cuda":
        from triton.testing import do_bench  # noqa: PLC0415

        return float(do_bench(fn, warmup=25 if quick else 50, rep=50 if quick else 200, return_mode="median"))
    fn()
    samples = []
    for _ in range(1 if quick else 10):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def graph_median_ms(fn: Callable[[], object]) -> float | str:
    """Median time of `fn` replayed from a CUDA graph (`triton.testing.do_bench_cudagraph`: many
    calls unrolled in one graph, so launch and Python costs drop out and what is left is the
    GPU's own time; no L2 flush between calls). On failure the error, in one line."""
    from triton.testing import do_bench_cudagraph  # noqa: PLC0415

    try:
        try:
            return float(do_bench_cudagraph(fn, rep=100, return_mode="median"))
        except TypeError:   # a Triton whose do_bench_cudagraph has no return_mode: its mean
            return float(do_bench_cudagraph(fn, rep=100))
    except Exception as exc:   # a capture that fails must not cost the other figures
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def kernels_runnable(device: torch.device) -> bool:
    return triton_available() and (device.type == "cuda" or interpreting())


def compare(kernel: str, shape: dict, torch_path: str, kernel_fn, torch_fn, device, quick, extra=None) -> dict:
    row = {"kernel": kernel, "shape": shape, "torch_path": torch_path}
    row["torch_ms"] = round(median_ms(torch_fn, device, quick), 5)
    if kernels_runnable(device):
        got, want = kernel_fn(), torch_fn()
        row["max_abs_err"] = max_abs_err(got, want)
        row["kernel_ms"] = round(median_ms(kernel_fn, device, quick), 5)
        row["speedup"] = round(row["torch_ms"] / row["kernel_ms"], 3) if row["kernel_ms"] > 0 else None
    else:
        row.update(kernel_ms=None, speedup=None, max_abs_err=None,
                   note="Triton cannot run here (no CUDA device and TRITON_INTERPRET is not 1)")
    for name, fn in (extra or {}).items():
        row[f"{name}_ms"] = round(median_ms(fn, device, quick), 5)
    return row


def max_abs_err(got, want) -> float:
    if isinstance(got, tuple):
        return max(max_abs_err(g, w) for g, w in zip(got, want))
    if not got.dtype.is_floating_point:
        return float((got != want).sum())   # token disagreements
    return float((got.float() - want.float()).abs().max()) if got.numel() else 0.0


def span_attention_cases(grid: Grid, device: torch.device, quick: bool) -> list[dict]:
    heads = QUICK_HEADS if quick else HEADS
    rows = []
    for name in grid.heads:
        h, hkv, d = heads[name]["n_heads"], heads[name]["n_kv_heads"], heads[name]["head_dim"]
        for n in grid.contexts:
            for l in grid.span_lengths:
                g = torch.Generator(device=device).manual_seed(n + l)

                def rand(*shape):
                    return torch.randn(*shape, generator=g, device=device).to(grid.dtype)

                q = rand(1, l, h, d).transpose(1, 2)          # the model's strided layout
                k_ctx, v_ctx = rand(1, hkv, n, d), rand(1, hkv, n, d)
                k_span, v_span = rand(1, l, hkv, d).transpose(1, 2), rand(1, l, hkv, d).transpose(1, 2)
                k_all, v_all = torch.cat([k_ctx, k_span], 2), torch.cat([v_ctx, v_span], 2)
                paths = {
                    "kernel": lambda: span_attention.span_attention_triton(q, k_ctx, v_ctx, k_span, v_span),
                    "torch": lambda: span_attention.span_attention_reference(q, k_ctx, v_ctx, k_span, v_span),
                    "sdpa_precat": lambda: torch.nn.functional.scaled_dot_product_attention(
                        q, k_all, v_all, enable_gqa=h != hkv),
                }
                row = compare(
                    "span_attention", dict(heads=name, n_heads=h, n_kv_heads=hkv, head_dim=d, L=l, N=n,
                                           dtype=str(grid.dtype).removeprefix("torch.")),
                    "torch.cat(context, span) + SDPA (the reference path)",
                    paths["kernel"], paths["torch"], device, quick, extra={"sdpa_precat": paths["sdpa_precat"]},
                )
                if kernels_runnable(device) and n <= ONE_LAUNCH_MAX_CONTEXT:
                    paths["one_launch"] = lambda: span_attention.span_attention_triton(
                        q, k_ctx, v_ctx, k_span, v_span, one_launch=True)
                    row.update(one_launch_ms=round(median_ms(paths["one_launch"], device, quick), 5),
                               one_launch_max_abs_err=max_abs_err(paths["one_launch"](), paths["torch"]()))
                if device.type == "cuda":
                    row.update(graphed(paths))
                rows.append(row)
    return rows


# The one-launch variant (one program per query block over the whole context, no merge) is
# measured where it could plausibly win: at 8192 keys its few programs would each read them all.
ONE_LAUNCH_MAX_CONTEXT = 2048


def graphed(paths: dict[str, Callable[[], object]]) -> dict:
    """Each path's median replayed from a CUDA graph, as a step captured whole would run it, and
    the speed-ups against the reference path there: what the GPU spends, launches left out."""
    times = {name: graph_median_ms(fn) for name, fn in paths.items()}
    out = {"graph_ms": {k: (round(v, 5) if isinstance(v, float) else v) for k, v in times.items()}}
    base = times.get("torch")
    if isinstance(base, float):
        out["graph_speedup"] = {k: round(base / v, 3) for k, v in times.items()
                                if k != "torch" and isinstance(v, float) and v > 0}
    return out


def unmask_select_cases(grid: Grid, device: torch.device, quick: bool) -> list[dict]:
    rows = []
    for dtype in grid.select_dtypes:
        for vocab in grid.vocabs:
            for r in grid.select_rows:
                g = torch.Generator(device=device).manual_seed(r + vocab)
                logits = (torch.randn(r, vocab, generator=g, device=device) * 3).to(dtype)
                rows.append(compare(
                    "unmask_select", dict(rows=r, vocab=vocab, dtype=str(dtype).removeprefix("torch."), temperature=0.0),
                    "log_softmax + exp + topk(2) + entropy + argmax + gather (the reference path)",
                    lambda: unmask_select.unmask_select_triton(logits),
                    lambda: unmask_select.unmask_select_reference(logits),
                    device, quick,
                ))
    return rows


def rmsnorm_cases(grid: Grid, device: torch.device, quick: bool) -> list[dict]:
    rows = []
    dims = (64,) if quick else tuple(MODEL_DIMS[name] for name in grid.heads)
    for dim in dims:
        for r in grid.span_lengths:
            g = torch.Generator(device=device).manual_seed(r + dim)
            x, res = (torch.randn(r, dim, generator=g, device=device).to(grid.dtype) for _ in range(2))
            w = torch.rand(dim, generator=g, device=device).to(grid.dtype) + 0.5
            rows.append(compare(
                "add_rms_norm", dict(rows=r, dim=dim, dtype=str(grid.dtype).removeprefix("torch.")),
                "residual + x, then eager RMSNorm",
                lambda: rmsnorm.add_rms_norm_triton(x, res, w, 1e-6),
                lambda: rmsnorm.add_rms_norm_reference(x, res, w, 1e-6),
                device, quick,
            ))
    return rows


def rope_cases(grid: Grid, device: torch.device, quick: bool) -> list[dict]:
    heads = QUICK_HEADS if quick else HEADS
    rows = []
    for name in grid.heads:
        h, d = heads[name]["n_heads"], heads[name]["head_dim"]
        for l in grid.span_lengths:
            x = torch.randn(1, l, h, d, device=device).to(grid.dtype).transpose(1, 2)
            cos, sin = Rotary(d, 1e6).cos_sin(torch.arange(1000, 1000 + l, device=device), grid.dtype)
            rows.append(compare(
                "rope", dict(heads=name, n_heads=h, head_dim=d, L=l, dtype=str(grid.dtype).removeprefix("torch.")),
                "eager rotate-half (slice, neg, cat, mul, mul, add)",
                lambda: rope.apply_rotary_triton(x, cos, sin),
                lambda: rope.apply_rotary_reference(x, cos, sin),
                device, quick,
            ))
    return rows


def all_cases(device: torch.device, quick: bool) -> list[dict]:
    grid = QUICK_GRID if quick else FULL_GRID
    return (span_attention_cases(grid, device, quick) + unmask_select_cases(grid, device, quick)
            + rmsnorm_cases(grid, device, quick) + rope_cases(grid, device, quick))

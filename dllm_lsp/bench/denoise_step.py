"""One denoising step of a Dream-7B-shaped model, with and without the kernels.

The model is the embedded architecture at Dream-7B's shape (dim 3584, 28 layers, 28 query /
4 key-value heads, ffn 18944, vocabulary 152064; tied head), random bf16 weights. A step is
what the engine does per denoising iteration: the L span rows through every layer against
a cached context of N keys, the LM head, and the unmask-select over the L rows.

Batch-1 decoding is memory-bound, so the floor is the weight-read bound: every weight byte
read once per step at the GPU's memory bandwidth (the KV cache read is reported beside it).
Variants: torch reference vs kernels, each eager and (on CUDA) replayed from a CUDA graph,
which removes the per-op launch cost that dominates an eager batch-1 step. Beside them, the
same weights decoding autoregressively (one row per forward pass), the cost per token that
a denoising step's L rows are compared with.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from dllm_lsp.arch.embedded import EmbeddedConfig, EmbeddedModel
from dllm_lsp.arch.layers import RMSNorm
from dllm_lsp.engine.cuda_graph import GraphedCall
from dllm_lsp.kernels.unmask_select import unmask_select

from .environment import variable_set
from .kernel_cases import kernels_runnable, median_ms
from .memory import weights_too_big
from .profiling import profile_calls

DREAM_7B = dict(vocab_size=152064, dim=3584, n_layers=28, n_heads=28, n_kv_heads=4, ffn_dim=18944,
                max_positions=32768, rope_theta=1e6)
QUICK_SHAPE = dict(vocab_size=97, dim=32, n_layers=2, n_heads=4, n_kv_heads=1, ffn_dim=48)


def kernel_mode(mode: str):
    """Route every dispatch function through one path ("triton" or "reference") for a while."""
    return variable_set("DLLM_LSP_KERNELS", mode)


def build_model(cfg: EmbeddedConfig, device: torch.device, dtype: torch.dtype) -> EmbeddedModel:
    """Random weights straight on the device in `dtype` (no fp32 copy of 7B parameters), in the
    layout a loaded model serves with (q/k/v and gate/up fused)."""
    with torch.device("meta"):
        model = EmbeddedModel(cfg)
    model = model.to(dtype).to_empty(device=device)
    with torch.no_grad():
        model.init_weights()
        for module in model.modules():
            if isinstance(module, RMSNorm):
                module.weight.fill_(1.0)
    return model.fuse_projections().eval()


def weight_bytes(model: EmbeddedModel) -> int:
    """Bytes one step reads: every parameter once (the tied embedding is read whole as the LM head)."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def make_step(model: EmbeddedModel, n_ctx: int, span_len: int) -> Callable[[], object]:
    cfg = model.cfg
    device, dtype = model.embed.weight.device, model.embed.weight.dtype
    g = torch.Generator(device=device).manual_seed(0)
    context = [tuple(torch.randn(1, cfg.n_kv_heads, n_ctx, cfg.head_dim, generator=g, device=device).to(dtype)
                     for _ in range(2)) for _ in range(cfg.n_layers)]
    span_ids = torch.full((1, span_len), cfg.mask_token_id, device=device)
    span_positions = torch.arange(n_ctx, n_ctx + span_len, device=device)

    def step():
        logits = model.span_logits(span_ids, span_positions, context)
        return unmask_select(logits[0], 0.0, None)

    step.kv_bytes = sum(k.numel() * k.element_size() * 2 for k, _ in context)
    return step


def cuda_graph(fn: Callable[[], object]) -> Callable[[], object]:
    """fn captured in a CUDA graph (after three warm-up calls on a side stream, which also compile
    the Triton kernels), as the server captures a step (engine/cuda_graph.py): its replay."""
    return GraphedCall(fn, device=torch.device("cuda", torch.cuda.current_device()), warm_ups=3)


def step_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "cpu" else torch.bfloat16


def step_model_too_big(device: torch.device, quick: bool) -> str | None:
    """Why the step's model cannot be built on `device` (memory.weights_too_big), or None."""
    cfg = EmbeddedConfig(**(QUICK_SHAPE if quick else DREAM_7B))
    return weights_too_big(lambda: EmbeddedModel(cfg), step_dtype(device), device)


def bench_step(device: torch.device, quick: bool, n_ctx: int, span_len: int, bandwidth: float | None,
               profile: bool = False) -> dict:
    dtype = step_dtype(device)
    shape = QUICK_SHAPE if quick else DREAM_7B
    cfg = EmbeddedConfig(**shape)
    model = build_model(cfg, device, dtype)
    step = make_step(model, n_ctx, span_len)
    weights = weight_bytes(model)
    result = {
        "model": {**shape, "head_dim": cfg.head_dim, "tied_head": True, "weights": "random", "fused_projections": True,
                  "parameters": model.num_parameters(), "dtype": str(dtype).removeprefix("torch.")},
        "context_tokens": n_ctx, "span_tokens": span_len, "batch": 1, "temperature": 0.0,
        "weight_bytes": weights, "kv_cache_bytes": step.kv_bytes,
        "bandwidth_bytes_per_s": bandwidth,
        "weight_read_bound_ms": round(weights / bandwidth * 1e3, 4) if bandwidth else None,
        "weight_and_kv_read_bound_ms": round((weights + step.kv_bytes) / bandwidth * 1e3, 4) if bandwidth else None,
        "variants": [],
    }
    modes = ["reference"] + (["triton"] if kernels_runnable(device) else [])
    with torch.no_grad():
        for mode in modes:
            with kernel_mode(mode):
                variants = [("eager", step)]
                if device.type == "cuda":
                    try:
                        variants.append(("cuda_graph", cuda_graph(step)))
                    except Exception as exc:   # a step that cannot be captured still has its eager figure
                        result["variants"].append({"kernels": mode == "triton", "execution": "cuda_graph",
                                                   "error": f"{type(exc).__name__}: {exc}".splitlines()[0]})
                for how, fn in variants:
                    ms = median_ms(fn, device, quick)
                    bound = result["weight_read_bound_ms"]
                    result["variants"].append({
                        "kernels": mode == "triton", "execution": how, "median_ms": round(ms, 4),
                        "x_weight_read_bound": round(ms / bound, 3) if bound else None,
                    })
                if profile:
                    result.setdefault("profile", {})[mode] = profile_calls(step, device)
        if len(modes) == 2:
            with kernel_mode("reference"):
                want = step()
            with kernel_mode("triton"):
                got = step()
            result["greedy_tokens_agree"] = float((got.token == want.token).float().mean())
        # On CPU the kernels only run interpreted: the baseline takes the reference there.
        ar_mode = modes[-1] if device.type == "cuda" else "reference"
        result["autoregressive_token"] = autoregressive_baseline(model, n_ctx, device, quick, ar_mode, result)
    return result


def autoregressive_baseline(model: EmbeddedModel, n_ctx: int, device: torch.device, quick: bool, mode: str,
                            result: dict) -> dict:
    """The same weights decoding one token per forward pass (one row against the cache): what an
    autoregressive model pays per token, beside what a denoising step pays for L rows."""
    one = make_step(model, n_ctx, 1)
    execution = "eager"
    with kernel_mode(mode):
        fn = one
        if device.type == "cuda":
            try:
                fn, execution = cuda_graph(one), "cuda_graph"
            except Exception:   # compared eager against eager then (the step's variants say why)
                pass
        ms = median_ms(fn, device, quick)
    same = [v["median_ms"] for v in result["variants"]
            if v["kernels"] == (mode == "triton") and v["execution"] == execution and "median_ms" in v]
    return {
        "kernels": mode == "triton", "execution": execution,
        "median_ms_per_token": round(ms, 4),
        "denoising_step_over_ar_token": round(same[0] / ms, 3) if same and ms > 0 else None,
    }

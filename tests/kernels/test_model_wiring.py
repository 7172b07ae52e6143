"""The kernels wired into the embedded model: a cached denoising step through the Triton path
(forced on CPU under the interpreter) matches the reference path and the uncached full-canvas
forward, and the dispatch policy picks what docs/kernels.md#dispatch says."""
from types import SimpleNamespace

import pytest
import torch

from dllm_lsp.arch.embedded import EmbeddedConfig, EmbeddedModel, SpanRows
from dllm_lsp.kernels import dispatch


def tiny_model(dtype=torch.float32) -> EmbeddedModel:
    torch.manual_seed(0)
    cfg = EmbeddedConfig(vocab_size=97, dim=32, n_layers=2, n_heads=4, n_kv_heads=1, ffn_dim=48)
    model = EmbeddedModel(cfg).eval()
    with torch.no_grad():
        model.embed.weight.mul_(20)
    return model.to(dtype)


def cached_step(model, ids, span):
    """The first step (context rows computed in the same pass), then a step on the cached context."""
    ctx_pos = (~span).nonzero()[:, 0]
    span_pos = span.nonzero()[:, 0]
    cfg = model.cfg
    empty = torch.zeros(1, cfg.n_kv_heads, 0, cfg.head_dim, dtype=model.embed.weight.dtype)
    spans = ids[None, span_pos].repeat(2, 1)
    (first, kv), = model.step([SpanRows(spans, span_pos, [(empty, empty)] * cfg.n_layers, ids[ctx_pos], ctx_pos)])
    later = model.span_logits(spans, span_pos, kv)
    torch.testing.assert_close(first, later, atol=1e-4, rtol=1e-4)
    return later


@pytest.fixture
def canvas():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 97, (14,), generator=g)
    span = torch.zeros(14, dtype=torch.bool)
    span[6:11] = True
    ids[span] = 0
    return ids, span


def test_triton_step_matches_reference_and_full_forward(canvas, monkeypatch):
    ids, span = canvas
    model = tiny_model()
    monkeypatch.setenv("DLLM_LSP_KERNELS", "reference")
    reference = cached_step(model, ids, span)
    with torch.no_grad():
        full = model(ids[None], span[None])[:, span]
    torch.testing.assert_close(reference[0:1], full, atol=1e-4, rtol=1e-4)
    monkeypatch.setenv("DLLM_LSP_KERNELS", "triton")
    assert dispatch.use_triton(ids.float())
    fused = cached_step(model, ids, span)
    torch.testing.assert_close(fused, reference, atol=1e-4, rtol=1e-4)


def test_dispatch_policy(monkeypatch):
    x = torch.zeros(2)
    monkeypatch.delenv("DLLM_LSP_KERNELS", raising=False)
    assert not dispatch.use_triton(x)                      # CPU: the reference
    monkeypatch.setenv("DLLM_LSP_KERNELS", "triton")
    assert dispatch.use_triton(x) == dispatch.interpreting()
    assert not dispatch.use_triton(torch.zeros(2, requires_grad=True))
    monkeypatch.setenv("DLLM_LSP_KERNELS", "fastest")
    with pytest.raises(ValueError, match="DLLM_LSP_KERNELS"):
        dispatch.use_triton(x)


def test_measured_policy_keeps_short_contexts_on_the_reference(monkeypatch):
    # "auto": span attention only over contexts where the H200 measured it faster than SDPA.
    monkeypatch.delenv("DLLM_LSP_KERNELS", raising=False)
    cutoff = dispatch.MIN_CONTEXT["span_attention"]
    assert not dispatch.worth_running("span_attention", 2048) and not dispatch.worth_running("span_attention", cutoff - 1)
    assert dispatch.worth_running("span_attention", cutoff) and dispatch.worth_running("span_attention", 8192)
    assert dispatch.worth_running("rope", 0)                         # no measured exception: always
    monkeypatch.setenv("DLLM_LSP_KERNELS", "triton")                 # forced: every length (the tests' path)
    assert dispatch.worth_running("span_attention", 16)


@pytest.mark.parametrize("mode", ["auto", "triton"])
def test_fp32_span_attention_on_cuda_stays_on_the_reference_in_every_mode(monkeypatch, mode):
    # The rule lives in dispatch.py (REFERENCE_ON_CUDA), not in the kernel file: the tensors' device
    # and dtype are all it reads, so stand-ins answer for CUDA tensors on a machine without a GPU.
    monkeypatch.setenv("DLLM_LSP_KERNELS", mode)
    long = 2 * dispatch.MIN_CONTEXT["span_attention"]
    cuda = {dtype: SimpleNamespace(is_cuda=True, dtype=dtype) for dtype in (torch.float32, torch.bfloat16)}
    assert not dispatch.worth_running("span_attention", long, cuda[torch.float32])
    assert dispatch.worth_running("span_attention", long, cuda[torch.bfloat16])
    assert dispatch.worth_running("span_attention", long, torch.zeros(1))     # fp32 on the CPU: the interpreter's
    assert dispatch.worth_running("rms_norm", 0, cuda[torch.float32])         # no such rule for the others


def test_kernels_import_and_fall_back_without_triton():
    """A machine without triton still imports every kernel module and runs the references."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['triton'] = None\n"   # makes `import triton` raise ImportError
        "import torch\n"
        "from dllm_lsp.kernels import dispatch, rmsnorm, rope, span_attention, unmask_select\n"
        "assert not dispatch.triton_available()\n"
        "q = torch.randn(1, 2, 3, 16); k = torch.randn(1, 1, 5, 16)\n"
        "out = span_attention.span_attention(q, k, k, k[:, :, :3], k[:, :, :3])\n"
        "sel = unmask_select.unmask_select(torch.randn(2, 9))\n"
        "y = rmsnorm.rms_norm(torch.randn(2, 8), torch.ones(8), 1e-6)\n"
        "print(tuple(out.shape), tuple(sel.token.shape), tuple(y.shape))\n"
    )
    env = {**os.environ, "DLLM_LSP_KERNELS": "triton", "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[0] == "(1, 2, 3, 16) (2,) (2, 8)"


def test_denoise_loop_through_the_kernels(canvas, monkeypatch):
    """The engine's denoising loop (unmask-select every step) decodes the same completion
    through the Triton path as through the references."""
    from dllm_lsp.arch.embedded_denoiser import EmbeddedDenoiser
    from dllm_lsp.engine.denoise import denoise
    from dllm_lsp.engine.denoiser import Canvas
    from dllm_lsp.engine.types import DecodeSettings
    from tokenizers import Tokenizer, models

    ids, span = canvas
    model = tiny_model()
    model.cfg.pad_token_id, model.cfg.eos_token_id = 1, 2
    layout = Canvas(ids=ids, slot_ranges=[(6, 11)])
    outcomes = {}
    for mode in ("reference", "triton"):
        monkeypatch.setenv("DLLM_LSP_KERNELS", mode)
        denoiser = EmbeddedDenoiser(model, tokenizer=Tokenizer(models.BPE()), name="tiny")   # (ids only: no text)
        outcomes[mode] = denoise(denoiser, layout, DecodeSettings(steps=2, n=2, threshold=0.5))
    assert torch.equal(outcomes["triton"].span_ids, outcomes["reference"].span_ids)
    assert outcomes["triton"].steps == outcomes["reference"].steps
    assert not (outcomes["triton"].span_ids == 0).any()       # every mask filled
    sampled = denoise(denoiser, layout, DecodeSettings(steps=1, n=2, temperature=0.8, seed=4))
    assert sampled.span_ids.shape == (2, 5) and not (sampled.span_ids == 0).any()

"""Run-time kernel fallback: a Triton kernel that fails to compile or launch is logged once,
disabled, and the call (and every later one) takes the torch reference; a completion through
the embedded model keeps working. The failure is forced by making the kernel entry point raise
what Triton raises for a kernel it cannot compile (no GPU here can produce a real one)."""
import logging

import pytest
import torch

from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.kernels import dispatch, rmsnorm, rope, span_attention, unmask_select
from dllm_lsp.loader import load_model


class CompilationError(Exception):
    """Stands in for triton.compiler.errors.CompilationError (what a failed kernel build raises)."""


@pytest.fixture(autouse=True)
def fresh_failures(monkeypatch):
    monkeypatch.setenv("DLLM_LSP_KERNELS", "triton")   # take the Triton path on CPU (interpreter)
    monkeypatch.delenv("DLLM_LSP_DISABLE_KERNELS", raising=False)
    dispatch.reset_kernel_failures()
    yield
    dispatch.reset_kernel_failures()


def broken(*args, **kwargs):
    raise CompilationError("at 12:8: unsupported layout for this architecture")


def test_a_failing_kernel_is_logged_once_and_the_reference_answers(monkeypatch, caplog):
    logits = torch.randn(5, 300) * 3
    want = unmask_select.unmask_select_reference(logits)
    calls = []

    def failing(*args):
        calls.append(1)
        broken()

    monkeypatch.setattr(unmask_select, "unmask_select_triton", failing)
    with caplog.at_level(logging.WARNING, logger="dllm_lsp.kernels"):
        for _ in range(3):
            got = unmask_select.unmask_select(logits)
            assert torch.equal(got.token, want.token) and torch.allclose(got.prob, want.prob)
    assert len(calls) == 1, "after the first failure the kernel is not tried again"
    warnings = [r for r in caplog.records if "unmask_select" in r.getMessage()]
    assert len(warnings) == 1 and "CompilationError" in warnings[0].getMessage()
    assert "unmask_select" in dispatch.disabled_kernels()
    assert dispatch.kernel_enabled("span_attention")   # the others are untouched


def test_bad_inputs_and_out_of_memory_are_not_kernel_faults(monkeypatch):
    with pytest.raises(dispatch.KernelInputError):
        unmask_select.unmask_select(torch.randn(2, 3, 4))
    assert dispatch.kernel_enabled("unmask_select")

    def oom(*args):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(rmsnorm, "rms_norm_triton", oom)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        rmsnorm.rms_norm(torch.randn(3, 8), torch.ones(8), 1e-6)
    assert dispatch.kernel_enabled("rms_norm")


def test_kernels_disabled_by_the_environment_are_never_called(monkeypatch):
    monkeypatch.setenv("DLLM_LSP_DISABLE_KERNELS", "span_attention, rope")
    monkeypatch.setattr(span_attention, "span_attention_triton", broken)
    q = torch.randn(1, 2, 3, 8)
    kc, vc, ks, vs = torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8), torch.randn(1, 1, 3, 8), torch.randn(1, 1, 3, 8)
    got = span_attention.span_attention(q, kc, vc, ks, vs)
    assert torch.allclose(got, span_attention.span_attention_reference(q, kc, vc, ks, vs))
    assert set(dispatch.disabled_kernels()) == {"span_attention", "rope"}


def test_completion_survives_every_kernel_failing(monkeypatch, tiny_model_dir, caplog):
    """The embedded model denoises with all four kernels broken: same completion as the reference run."""
    request = InfillRequest.single("def area(w, h):\n    return ", "\n", 8)
    monkeypatch.setenv("DLLM_LSP_KERNELS", "reference")
    want = Engine(load_model(str(tiny_model_dir), "cpu")).infill(request, DecodeSettings(steps=4)).text

    monkeypatch.setenv("DLLM_LSP_KERNELS", "triton")
    for module, name in ((span_attention, "span_attention_triton"), (unmask_select, "unmask_select_triton"),
                         (rmsnorm, "rms_norm_triton"), (rmsnorm, "add_rms_norm_triton"),
                         (rope, "apply_rotary_triton")):
        monkeypatch.setattr(module, name, broken)
    engine = Engine(load_model(str(tiny_model_dir), "cpu"))
    with caplog.at_level(logging.WARNING, logger="dllm_lsp.kernels"):
        first = engine.infill(request, DecodeSettings(steps=4)).text
        second = engine.infill(request, DecodeSettings(steps=4)).text
    assert first == second == want
    failed = set(dispatch.disabled_kernels())
    assert failed == {"unmask_select", "rms_norm"} | (failed & {"span_attention", "rope"})
    assert len([r for r in caplog.records if r.name == "dllm_lsp.kernels"]) == len(failed)

"""Fused RMSNorm (+ residual): the Triton kernel (interpreted on CPU) against the torch reference.

fp32: 1e-5. bf16: the interpreter rounds fp32 -> bf16 toward zero where CUDA rounds to nearest,
so outputs may differ by one bf16 step at each of the two roundings: 2e-2 relative/absolute.
"""
import pytest
import torch

from dllm_lsp.arch.layers import RMSNorm
from dllm_lsp.kernels.rmsnorm import (
    add_rms_norm_reference, add_rms_norm_triton, rms_norm_reference, rms_norm_triton,
)

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


@pytest.mark.parametrize("shape", [(1, 1), (3, 37), (2, 5, 64), (1, 3584)], ids=str)
@pytest.mark.parametrize("dtype,weight_dtype", [
    (torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
], ids=["fp32", "bf16", "bf16-fp32-weight"])
def test_kernels_match_reference(shape, dtype, weight_dtype):
    g = torch.Generator().manual_seed(shape[-1])
    x, residual = (torch.randn(*shape, generator=g).to(dtype) for _ in range(2))
    weight = (torch.rand(shape[-1], generator=g) + 0.5).to(weight_dtype)
    out = rms_norm_triton(x, weight, 1e-6)
    want = rms_norm_reference(x, weight, 1e-6)
    assert out.dtype == want.dtype and out.shape == want.shape
    torch.testing.assert_close(out, want, **TOL[dtype])
    normed, summed = add_rms_norm_triton(x, residual, weight, 1e-6)
    want_normed, want_summed = add_rms_norm_reference(x, residual, weight, 1e-6)
    torch.testing.assert_close(summed, want_summed, **TOL[dtype])
    torch.testing.assert_close(normed, want_normed, **TOL[dtype])


def test_reference_is_the_model_norm():
    norm = RMSNorm(24, eps=1e-5)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(4, 24)
    torch.testing.assert_close(norm(x), rms_norm_reference(x, norm.weight, 1e-5))


def test_training_keeps_gradients(monkeypatch):
    """Forced Triton mode still takes the differentiable reference when gradients are needed."""
    monkeypatch.setenv("DLLM_LSP_KERNELS", "triton")
    norm = RMSNorm(8)
    norm(torch.randn(2, 8)).sum().backward()
    assert norm.weight.grad is not None


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="weight"):
        rms_norm_triton(torch.randn(2, 8), torch.ones(7), 1e-6)
    with pytest.raises(ValueError, match="residual"):
        add_rms_norm_triton(torch.randn(2, 8), torch.randn(2, 7), torch.ones(8), 1e-6)

"""RoPE on the active rows: the Triton kernel (interpreted on CPU) against the eager formula.

fp32 must agree to 1e-6 (same products in the same order). bf16: the interpreter rounds toward
zero where CUDA rounds to nearest: 2e-2 relative/absolute.
"""
import pytest
import torch

from dllm_lsp.arch.layers import Rotary
from dllm_lsp.kernels.rope import apply_rotary_reference, apply_rotary_triton

TOL = {torch.float32: dict(atol=1e-6, rtol=1e-6), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("b,h,t,d,per_batch", [
    (1, 1, 1, 16, False), (2, 3, 5, 24, False), (2, 2, 3, 64, True), (1, 7, 2, 128, False),
])
def test_kernel_matches_reference(b, h, t, d, per_batch, dtype):
    g = torch.Generator().manual_seed(d)
    x = torch.randn(b, t, h, d, generator=g).transpose(1, 2).to(dtype)   # the model's strided layout
    positions = torch.randint(0, 4000, (b, t) if per_batch else (t,), generator=g)
    cos, sin = Rotary(d, 1e6).cos_sin(positions, dtype)
    torch.testing.assert_close(apply_rotary_triton(x, cos, sin), apply_rotary_reference(x, cos, sin), **TOL[dtype])


def test_bad_inputs_raise():
    cos, sin = Rotary(16, 1e4).cos_sin(torch.arange(3), torch.float32)
    with pytest.raises(ValueError, match="even D"):
        apply_rotary_triton(torch.randn(1, 1, 3, 15), cos, sin)
    with pytest.raises(ValueError, match="cos/sin"):
        apply_rotary_triton(torch.randn(1, 1, 4, 16), cos, sin)
    with pytest.raises(ValueError, match="dtype"):
        apply_rotary_triton(torch.randn(1, 1, 3, 16).bfloat16(), cos, sin)

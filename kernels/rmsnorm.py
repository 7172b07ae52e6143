"""Fused RMSNorm (+ residual add): one read of each row, one write of each output.

Eager RMSNorm is six small kernels (cast, square, mean, rsqrt, two multiplies) and the
residual add before it a seventh; in a batch-1 denoising step every one of them is a
launch over a few rows. `add_rms_norm` does the pre-norm transformer's
`h = h + branch; normed = norm(h)` in one kernel.

Semantics follow dllm_lsp.arch.layers.RMSNorm exactly (Llama convention): the residual sum
is rounded to the input dtype, normalised in fp32, rounded back to the input dtype, then
multiplied by the weight (output dtype = torch's promotion of weight and input).
"""
from __future__ import annotations

import torch

from .dispatch import KernelInputError, next_power_of_2, run_kernel, triton_available, use_triton


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(dtype)


def add_rms_norm_reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(residual + x), residual + x)."""
    summed = residual + x
    return rms_norm_reference(summed, weight, eps), summed


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if use_triton(x, weight):
        return run_kernel("rms_norm", rms_norm_triton, rms_norm_reference, x, weight, eps)
    return rms_norm_reference(x, weight, eps)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    if use_triton(x, residual, weight):
        return run_kernel("rms_norm", add_rms_norm_triton, add_rms_norm_reference, x, residual, weight, eps)
    return add_rms_norm_reference(x, residual, weight, eps)


def check_inputs(x: torch.Tensor, weight: torch.Tensor, residual: torch.Tensor | None) -> None:
    if weight.dim() != 1 or x.shape[-1] != weight.shape[0]:
        raise KernelInputError(f"rms_norm: weight must be [{x.shape[-1]}] for input {tuple(x.shape)}, got {tuple(weight.shape)}")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise KernelInputError(f"add_rms_norm: residual {tuple(residual.shape)} {residual.dtype} must match "
                         f"the input {tuple(x.shape)} {x.dtype}")


if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _rms_norm_kernel(X, RES, W, Y, SUM, D, eps,
                         HAS_RESIDUAL: tl.constexpr, BLOCK_D: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_D)
        ok = cols < D
        x = tl.load(X + row * D + cols, mask=ok, other=0.0)
        if HAS_RESIDUAL:
            # Round the sum to the stream dtype first, as the eager `residual + x` does.
            x = (x.to(tl.float32) + tl.load(RES + row * D + cols, mask=ok, other=0.0).to(tl.float32)).to(X.dtype.element_ty)
            tl.store(SUM + row * D + cols, x, mask=ok)
        xf = x.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, 0) / D + eps)
        normed = (xf * rstd).to(X.dtype.element_ty)
        w = tl.load(W + cols, mask=ok, other=0.0)
        out_ty = Y.dtype.element_ty
        y = normed.to(tl.float32) * w.to(tl.float32)
        tl.store(Y + row * D + cols, y.to(out_ty), mask=ok)


def norm_num_warps(block_d: int) -> int:
    """About 8 columns per thread: one warp up to 256 columns, 16 warps for 4096 (dim 3584)."""
    return min(16, max(1, block_d // 256))


def _launch(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float):
    if not triton_available():
        raise RuntimeError("rms_norm_triton needs the triton package")
    check_inputs(x, weight, residual)
    d = x.shape[-1]
    x2 = x.reshape(-1, d).contiguous()
    res2 = residual.reshape(-1, d).contiguous() if residual is not None else x2
    out = torch.empty(x2.shape, device=x.device, dtype=torch.result_type(weight, x))
    summed = torch.empty_like(x2) if residual is not None else x2
    block_d = max(16, next_power_of_2(d))
    if x2.shape[0]:
        _rms_norm_kernel[(x2.shape[0],)](
            x2, res2, weight, out, summed, d, eps,
            HAS_RESIDUAL=residual is not None, BLOCK_D=block_d,
            num_warps=norm_num_warps(block_d),
        )
    return out.view(x.shape), summed.view(x.shape)


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _launch(x, None, weight, eps)[0]


def add_rms_norm_triton(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return _launch(x, residual, weight, eps)

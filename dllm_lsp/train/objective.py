"""The masked-diffusion loss on span slots (LLaDA / MDLM style), plus an optional causal LM
loss on the context.

Per window, t ~ U(0, 1) (stratified across the batch to cut variance) and every slot
position is masked with probability t; cross-entropy is taken on the masked positions.
Weighting: "inv_t" is the MDLM/LLaDA estimator (sum of masked CE / (t * slot positions));
"masked_mean" (default) divides by the number of masked positions instead. Both have the same
expectation per window up to the t-to-count ratio, but masked_mean has much lower variance,
which matters for tiny models and short runs.

Context tokens are causal (the layout), so their hidden states can predict the next
context token for free; `ar_weight` > 0 adds that loss, giving a training signal at every
position instead of only at the few masked ones.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dllm_lsp.arch.embedded import EmbeddedModel

from .examples import IGNORE


@dataclass(frozen=True)
class ObjectiveOptions:
    weighting: str = "masked_mean"    # or "inv_t"
    ar_weight: float = 0.5
    ar_fraction: float = 1.0          # share of context positions scored by the AR loss (< 1 saves head work)
    min_t: float = 1e-3
    late_pad_weight: float = 0.1      # weight of pads after a slot's first pad (see late_pads)

    def __post_init__(self) -> None:
        if self.weighting not in ("masked_mean", "inv_t"):
            raise ValueError(f"weighting must be masked_mean or inv_t, not {self.weighting!r}")


def mask_spans(ids: torch.Tensor, is_span: torch.Tensor, mask_id: int, min_t: float,
               generator: torch.Generator | None = None):
    """Mask slot positions with a per-window ratio t; returns (noisy ids, masked [B,T], t [B])."""
    b = ids.shape[0]
    u = (torch.arange(b, device=ids.device) + torch.rand(b, device=ids.device, generator=generator)) / b
    t = u[torch.randperm(b, device=ids.device, generator=generator)].clamp_min(min_t)
    draw = torch.rand(ids.shape, device=ids.device, generator=generator)
    masked = is_span & (draw < t[:, None])
    # Every window masks at least one slot position, or it would teach nothing.
    none = ~masked.any(1) & is_span.any(1)
    if none.any():
        first = torch.where(is_span, draw, torch.full_like(draw, 2.0)).argmin(1)
        masked[none, first[none]] = True
    noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
    return noisy, masked, t


def late_pads(ids: torch.Tensor, is_span: torch.Tensor, pad_id: int) -> torch.Tensor:
    """[B, T] bool: pads that follow another pad in the same slot.

    Only the first pad carries information (where the span ends); the decoder collapses the
    rest of the slot after it. Down-weighting the others keeps the pad class, which fills most
    slot positions, from swamping the content tokens.
    """
    pad = (ids == pad_id) & is_span
    prev = torch.zeros_like(pad)
    prev[:, 1:] = pad[:, :-1]
    return pad & prev


def diffusion_loss(model: EmbeddedModel, ids: torch.Tensor, is_span: torch.Tensor, ar_target: torch.Tensor,
                   opts: ObjectiveOptions, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """{"loss": what to minimise, "diffusion": masked CE per masked token, "ar": context CE}."""
    noisy, masked, t = mask_spans(ids, is_span, model.cfg.mask_token_id, opts.min_t, generator)
    hidden = model(noisy, is_span, return_hidden=True)
    # Only rows that carry a loss go through the (vocabulary-wide) head.
    rows = masked.nonzero(as_tuple=True)
    ce = F.cross_entropy(model.head(hidden[rows]).float(), ids[rows], reduction="none")
    weight = torch.where(late_pads(ids, is_span, model.cfg.pad_token_id), opts.late_pad_weight, 1.0).to(ce.dtype)
    w = weight[rows]
    per_window = torch.zeros(ids.shape[0], device=ids.device, dtype=ce.dtype).index_add_(0, rows[0], ce * w)
    if opts.weighting == "inv_t":
        diff = (per_window / (t * weight.masked_fill(~is_span, 0).sum(1).clamp_min(1e-6))).mean()
    else:
        masked_weight = torch.zeros_like(per_window).index_add_(0, rows[0], w)
        diff = (per_window / masked_weight.clamp_min(1e-6)).mean()
    out = {"diffusion": ce.mean().detach(), "loss": diff}
    if opts.ar_weight > 0:
        scored = ar_target != IGNORE
        if opts.ar_fraction < 1.0:
            scored &= torch.rand(ar_target.shape, device=ar_target.device, generator=generator) < opts.ar_fraction
        ar_rows = scored.nonzero(as_tuple=True)
        if ar_rows[0].numel():
            ar = F.cross_entropy(model.head(hidden[ar_rows]).float(), ar_target[ar_rows])
            out["ar"] = ar.detach()
            out["loss"] = diff + opts.ar_weight * ar
    return out

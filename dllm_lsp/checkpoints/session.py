"""One denoising run over a canvas, with the Fast-dLLM dual cache or without it.

These models attend bidirectionally, so a context token's keys/values depend on the span and
no cache is exact. The dual cache (Fast-dLLM) accepts that: a full forward pass over the
canvas at the first step stores the keys/values of every context token (prefix *and*
suffix); later steps recompute only the *active* rows -- the span tokens and, for families
whose logits are shifted, the token just before each slot, whose output predicts the slot's
first token -- attending to the stored context plus themselves. Every `refresh_every` steps
(0: never) the full pass runs again and refreshes the stored context.

`mode="none"` runs the full pass every step: the exact path, kept for comparison.
"""
from __future__ import annotations

import torch

from dllm_lsp.engine.denoiser import Canvas
from dllm_lsp.engine.types import CacheSettings

from .architecture import KV, BidirectionalLM


class CheckpointSession:
    def __init__(self, model: BidirectionalLM, canvas: Canvas, shift: int, cache: CacheSettings,
                 vocab_limit: int, blocked: tuple[int, ...]) -> None:
        self.model = model
        self.cache = cache
        device = model.device
        length = canvas.length
        span = canvas.span_positions()
        # Row whose output predicts each span token: itself, or the token before it (Dream's shift;
        # position 0 predicts itself, as the reference's `cat([logits[:, :1], logits[:, :-1]])` does).
        pred = (span - shift).clamp_min(0)
        active = torch.unique(torch.cat([span, pred]))          # sorted
        context = torch.ones(length, dtype=torch.bool)
        context[active] = False
        self.pred_rows = pred.to(device)
        self.active = active.to(device)
        self.pred_in_active = torch.searchsorted(active, pred).to(device)
        self.context_index = context.nonzero()[:, 0].to(device)
        self.rope_all = model.cos_sin(torch.arange(length))
        self.rope_active = model.cos_sin(active)
        self.vocab_limit = vocab_limit
        self.blocked = torch.tensor(blocked, dtype=torch.long, device=device) if blocked else None
        self.context_kv: list[KV] | None = None
        self.steps = 0
        self.full_passes = 0

    def _refresh_due(self) -> bool:
        if self.cache.mode == "none" or self.context_kv is None or self.context_index.numel() == 0:
            return True      # (a canvas that is all span has no context to cache)
        every = self.cache.refresh_every
        return every > 0 and self.steps % every == 0

    def hidden_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> hidden states [B, S, D] of the rows that predict each span token."""
        if self._refresh_due():
            keep = self.cache.mode == "dual"
            hidden, kv = self.model.full(ids, self.rope_all, keep_kv=keep)
            if keep:
                idx = self.context_index
                self.context_kv = [(k.index_select(2, idx), v.index_select(2, idx)) for k, v in kv]
            self.full_passes += 1
            return hidden.index_select(1, self.pred_rows)
        hidden = self.model.cached(ids.index_select(1, self.active), self.rope_active, self.context_kv)
        return hidden.index_select(1, self.pred_in_active)

    @torch.no_grad()
    def logits(self, ids: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> fp32 logits [B, S, V_tokenizer] (row s predicts span token s), or
        [R, V_tokenizer] for the rows `rows` ([B, S] bool) selects."""
        hidden = self.hidden_rows(ids)
        self.steps += 1
        logits = self.model.head(hidden if rows is None else hidden[rows])[..., : self.vocab_limit].float()
        if self.blocked is not None:
            # Never propose the mask itself (nor family-reserved ids) as a span token.
            logits.index_fill_(-1, self.blocked, float("-inf"))
        return logits

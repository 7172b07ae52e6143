"""One denoising run over a canvas, with the Fast-dLLM dual cache or without it.

These models attend bidirectionally, so a context token's keys/values depend on the span and
no cache is exact. The dual cache (Fast-dLLM) accepts that: a full forward pass over the
canvas at the first step stores the keys/values of every context token (prefix *and*
suffix); later steps recompute only the *active* rows -- the span tokens and, for families
whose logits are shifted, the token just before each slot, whose output predicts the slot's
first token -- attending to the stored context plus themselves. Every `refresh_every` steps
(0: never) the full pass runs again and refreshes the stored context.

`mode="none"` runs the full pass every step: the exact path, kept for comparison.

With the model's `cuda_graphs` on, a session's cached steps (its active rows against the
stored context, the head over every span row included) replay from a CUDA graph captured on
the first of them (engine/cuda_graph.py). Why: a 7B model's eager cached step is hundreds of
kernel launches from Python, and on an H200 it cost 16.3 ms against a 3.4 ms weight-read bound
(docs/results/gpu-job/20261126-0024/after/checkpoint-h200-no-shared-step.json). A refresh
replaces the stored context, so the next cached step captures anew.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import torch

from dllm_lsp.engine.cuda_graph import GraphedCall, GraphSwitch, capture_or_none
from dllm_lsp.engine.denoiser import Canvas
from dllm_lsp.engine.types import CacheSettings

from dllm_lsp.kernels.rope import apply_rotary

from .architecture import KV, BidirectionalLM
from .context_store import ContextEntry, ContextStore, Reuse


class CheckpointSession:
    def __init__(self, model: BidirectionalLM, canvas: Canvas, shift: int, cache: CacheSettings,
                 vocab_limit: int, store: ContextStore | None = None,
                 count_context_time: Callable[[float], None] = lambda seconds: None, batch: int = 1,
                 graphs: GraphSwitch | None = None) -> None:
        self.model = model
        self.graphs = graphs            # whose `cuda_graphs` says whether cached steps replay from a graph
        self.graphed: GraphedCall | None = None
        self._graphed_context: list[KV] | None = None   # the stored context the graph reads
        self.batch = batch                             # candidates decoded together
        self.count_context_time = count_context_time   # seconds of context work done in a step
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
        self.context_kv: list[KV] | None = None
        self.steps = 0
        self.full_passes = 0
        self._prefilled: tuple[torch.Tensor, torch.Tensor] | None = None   # (ids, hidden) of `prefill`
        # Cache mode "reuse": where this canvas's context is kept, and what its first pass takes
        # from a recent canvas (context_store.py).
        self.store = store if cache.mode == "reuse" else None
        self.reuse: Reuse | None = None
        # Context tokens before the end of the last slot: the suffix starts at this index.
        self.split = int((self.context_index < canvas.slot_ranges[-1][1]).sum()) if canvas.slot_ranges else 0
        if self.store is not None:
            index = context.nonzero()[:, 0]
            self.reuse = self.store.match(canvas.ids[index], index, self.split)
        self.reused_tokens = self.reuse.tokens if self.reuse is not None else 0
        self._reusing = None        # the reusing pass in progress (`reusing_rows` -> `took_reusing_pass`)
        self.fresh_share = 0.0      # of its rows, the context tokens it computes

    def prefill(self, ids: torch.Tensor) -> None:
        """Run the first step's full pass over `ids` [B, T] now, when the session opens
        (`CheckpointDenoiser.first_pass`): it fills the context cache, and a first step over the
        same ids then only applies the LM head. So the pass counts as the context's work
        (`Denoiser.context_stats`), and the step scheduler, which opens sessions outside its
        timed steps, times steps rather than prefills."""
        self._prefilled = (ids, self._full_pass(ids))

    def prefilled_step(self, ids: torch.Tensor) -> torch.Tensor | None:
        """The first step, when `prefill` ran it over these ids: hidden [B, S, D] of the rows
        that predict each span token, the step counted; else None."""
        hidden = self._take_prefilled(ids)
        if hidden is not None:
            self.steps += 1
        return hidden

    def _take_prefilled(self, ids: torch.Tensor) -> torch.Tensor | None:
        # Taken once: a first step over other ids (not what the engine's loops do) runs its own pass.
        pending, self._prefilled = self._prefilled, None
        if pending is None or pending[0].shape != ids.shape or not torch.equal(pending[0], ids):
            return None
        return pending[1]

    def refresh_due(self) -> bool:
        """Whether this session's next step is a full pass (else a cached step over its active rows,
        or a first step its prefill already ran)."""
        return self._prefilled is None and self._refresh_due()

    def _refresh_due(self) -> bool:
        if self.steps == 0 or not self.cache.keeps_context or self.context_kv is None or self.context_index.numel() == 0:
            return True      # (a canvas that is all span has no context to cache)
        every = self.cache.refresh_every
        return every > 0 and self.steps % every == 0

    def _full_pass(self, ids: torch.Tensor) -> torch.Tensor:
        if self.full_passes == 0 and self.reuse is not None:
            return self._reusing_pass(ids)
        keep = self.cache.keeps_context
        hidden, kv = self.model.full(ids, self.rope_all, keep_kv=keep)
        if keep:
            idx = self.context_index
            self.context_kv = [(k.index_select(2, idx), v.index_select(2, idx)) for k, v in kv]
        self.full_passes += 1
        if self.full_passes == 1:           # the first pass's context; a refresh's is not kept
            self._keep_context(ids, generation=0)
        return hidden.index_select(1, self.pred_rows)

    def _reusing_pass(self, ids: torch.Tensor) -> torch.Tensor:
        """The first pass of cache mode "reuse", alone: the new context tokens and the active rows,
        against the reused prefix and tail (context_store.py)."""
        began = time.perf_counter()
        rows, rope, context = self.reusing_rows(ids)
        (hidden, row_kv), = self.model.cached_ragged([rows], [rope], [context], keep_kv=True)
        out = self.took_reusing_pass(hidden, row_kv)
        self.count_context_time((time.perf_counter() - began) * self.fresh_share)
        return out

    def reusing_pass_due(self) -> bool:
        """Whether the next step is this session's first pass in cache mode "reuse": the typed
        context tokens and the active rows against the kept keys/values. Few rows, so it is not
        a prefill: it joins a shared step (`CheckpointDenoiser.batch_logits`) like a cached one."""
        return self.reuse is not None and self.full_passes == 0 and self._prefilled is None

    @property
    def pending_rows(self) -> int:
        """Context rows a reusing pass due next runs besides the active rows (for every candidate)."""
        return (int(self.context_index.numel()) - self.reused_tokens) * self.batch if self.reusing_pass_due() else 0

    def reusing_rows(self, ids: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], list[KV]]:
        """The reusing pass's input: the rows it runs [B, R] (the context tokens the reused
        segments do not hold, and the active rows, in canvas order), their cos/sin, and per
        layer the kept keys/values they attend to besides themselves; `took_reusing_pass` takes
        its output."""
        reuse, batch = self.reuse, ids.shape[0]
        index = self.context_index
        # Canvas order: the fresh context runs between the reused segments.
        pieces: list[tuple[int | None, int, int]] = []   # (segment number, or None: fresh; context indices)
        at = 0
        for n, seg in enumerate(reuse.segments):
            if seg.new > at:
                pieces.append((None, at, seg.new))
            pieces.append((n, seg.new, seg.new + seg.length))
            at = seg.new + seg.length
        if at < index.numel():
            pieces.append((None, at, index.numel()))
        fresh = torch.cat([index[a:b] for n, a, b in pieces if n is None] + [index[:0]])
        rows = torch.unique(torch.cat([fresh, self.active]))                   # sorted canvas positions

        def rotate(keys: torch.Tensor, shift: int) -> torch.Tensor:          # kept keys moved `shift` on
            return apply_rotary(keys, *self.model.cos_sin(torch.full((keys.shape[2],), shift)))

        def wide(t: torch.Tensor) -> torch.Tensor:
            return t.expand(batch, -1, -1, -1)

        kept = [[(wide(k), wide(v)) for k, v in reuse.keys_values(i, rotate)] for i in range(len(self.model.layers))]
        self._reusing = (ids, pieces, rows, kept)
        self.fresh_share = fresh.numel() / max(rows.numel(), 1)
        context = [(torch.cat([k for k, _ in layer], 2), torch.cat([v for _, v in layer], 2)) for layer in kept]
        return ids.index_select(1, rows), self.model.cos_sin(rows), context

    def took_reusing_pass(self, hidden: torch.Tensor, row_kv: list[KV]) -> torch.Tensor:
        """The reusing pass's hidden states [B, R, D] and its rows' keys/values per layer -> the
        hidden states of the rows that predict each span token [B, S, D]. The context cache is
        then the reused keys/values and the new tokens' own, in canvas order, and is kept."""
        (ids, pieces, rows, kept), self._reusing = self._reusing, None
        index = self.context_index
        self.context_kv = []
        for layer, (rk, rv) in zip(kept, row_kv):
            ks, vs = [], []
            for n, a, b in pieces:
                if n is None:
                    at_rows = torch.searchsorted(rows, index[a:b])
                    ks.append(rk.index_select(2, at_rows))
                    vs.append(rv.index_select(2, at_rows))
                else:
                    ks.append(layer[n][0])
                    vs.append(layer[n][1])
            self.context_kv.append((torch.cat(ks, 2), torch.cat(vs, 2)))
        self.full_passes += 1
        self._keep_context(ids, generation=self.reuse.entry.generation + 1)
        return hidden.index_select(1, torch.searchsorted(rows, self.pred_rows))

    def _keep_context(self, ids: torch.Tensor, generation: int) -> None:
        """Cache mode "reuse": keep this canvas's context for the requests after it, when every
        row of the batch has the same context tokens (their keys/values may differ by the span
        each row saw; the first row's are kept)."""
        idx = self.context_index
        if self.store is None or self.context_kv is None:
            return
        context = ids.index_select(1, idx)
        if not bool((context == context[:1]).all()):
            return

        def first_row(t: torch.Tensor) -> torch.Tensor:   # a copy when the batch would stay alive behind a view
            return t[:1].clone() if t.shape[0] > 1 else t

        entry = ContextEntry(context[0].cpu(), idx.cpu(), self.split,
                             [(first_row(k), first_row(v)) for k, v in self.context_kv], generation)
        self.store.keep(entry, replaces=self.reuse.entry if self.reuse is not None else None)

    def hidden_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] -> hidden states [B, S, D] of the rows that predict each span token."""
        hidden = self._take_prefilled(ids)
        if hidden is not None:
            return hidden
        if self._refresh_due():
            return self._full_pass(ids)
        hidden = self.model.cached(ids.index_select(1, self.active), self.rope_active, self.context_kv)
        return hidden.index_select(1, self.pred_in_active)

    def shared_step_rows(self, ids: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], list[KV]]:
        """What this session's next step runs in a shared pass (`BidirectionalLM.cached_ragged`):
        its reusing pass's rows, or a cached step's active rows [B, A], their cos/sin and the
        keys/values they attend to besides themselves."""
        if self.reusing_pass_due():
            return self.reusing_rows(ids)
        return ids.index_select(1, self.active), self.rope_active, self.context_kv

    def took_shared_step(self, hidden: torch.Tensor, row_kv: list[KV] | None) -> torch.Tensor:
        """The hidden states [B, A, D] of this session's rows in a shared pass (and their keys/values
        per layer) -> those of the rows that predict each span token [B, S, D]; counts the step."""
        self.steps += 1
        if self._reusing is not None:
            return self.took_reusing_pass(hidden, row_kv)
        return hidden.index_select(1, self.pred_in_active)

    @torch.no_grad()
    def logits(self, ids: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] -> fp32 logits [B, S, V_tokenizer] (row s predicts span token s), or
        [R, V_tokenizer] for the rows `rows` ([B, S] bool) selects."""
        if self.graphs is not None and self.graphs.cuda_graphs and self._prefilled is None and not self._refresh_due():
            logits = self._replayed(ids.index_select(1, self.active))
            if logits is not None:     # [B, S, V]: a static buffer, so what is kept is copied
                self.steps += 1
                return logits.clone() if rows is None else logits[rows]
        hidden = self.hidden_rows(ids)
        self.steps += 1
        return span_logits(self.model, hidden if rows is None else hidden[rows], self.vocab_limit)

    def _cached_logits(self, active_ids: torch.Tensor) -> torch.Tensor:
        """A cached step whole: the active rows [B, A] against the stored context -> the logits
        [B, S, V_tokenizer] of every span row (a graph has fixed shapes, so the head runs on
        decided rows too)."""
        hidden = self.model.cached(active_ids, self.rope_active, self.context_kv)
        return span_logits(self.model, hidden.index_select(1, self.pred_in_active), self.vocab_limit)

    def _replayed(self, active_ids: torch.Tensor) -> torch.Tensor | None:
        """A cached step's logits from the session's graph: captured on its first cached step
        against the current stored context (whose answer is the capture's warm-up call), and
        again after a refresh replaced that context; replayed otherwise. None when the capture
        failed: the model then runs eagerly from now on."""
        if self.graphed is not None and self._graphed_context is self.context_kv:
            return self.graphed(active_ids)
        self.graphed, self._graphed_context = None, self.context_kv   # the old graph's memory goes first
        self.graphed = capture_or_none(self.graphs.name, self._cached_logits, (active_ids,))
        if self.graphed is None:
            self.graphs.cuda_graphs = False
            return None
        return self.graphed.first


def span_logits(model: BidirectionalLM, hidden: torch.Tensor, vocab_limit: int) -> torch.Tensor:
    """hidden [..., D] of rows that predict span tokens -> fp32 logits [..., V_tokenizer]: the
    model's scores, the mask's included (keeping the mask out of a span is a decoding rule: the
    engine's loops apply it, denoise.never_mask)."""
    return model.head(hidden)[..., :vocab_limit].float()

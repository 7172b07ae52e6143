"""The block-by-block decode loop for block-diffusion models (SDAR, LLaDA2.0, Fast-dLLM v2, ...).

These models are causal across blocks of a few tokens and bidirectional inside a block, so a
span is decoded left to right one block at a time: the block's masks are filled by the same
confidence-threshold rules as the masked-diffusion loop (`denoise.choose_commits`, ends decided
in order, a confident end closes the span), then the finished block goes into the model's exact
KV cache and the next block starts. Each block gets the step budget `settings.steps`.

Stop rules: a committed end token (pad / EOS) ends the span (everything after it becomes pad);
a one-line slot stops at the first finished block that contains a line break (post-processing
cuts the line there); the span's width bounds the rest.

Several slots are filled one after another, left to right: slot k sees the text before it
(earlier slots filled) as prefix and the text after it, without the later holes, as suffix.

The model side is `BlockDiffusionPort`: context formatting, an exact block cache, the logits
of one block. The loop owns every decision.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

from .denoise import (
    Cancelled, DenoiseOutcome, StepCallback, choose_commits, collapse_after_pad, hold_back_early_ends, propose,
)
from .denoiser import Canvas, SpecialTokens
from .types import CacheSettings, DecodeSettings



@runtime_checkable
class BlockDiffusionPort(Protocol):
    """What the block-wise loop needs from a model."""

    block_size: int                   # tokens per block; blocks are counted from position 0
    sub_block_size: int | None        # decode a block in sub-blocks of this size, left to right (Fast-dLLM v2)
    special: SpecialTokens
    device: torch.device

    def context_ids(self, prefix: list[int], suffix: list[int]) -> list[int]:
        """The tokens before the span (fill-in-the-middle formatting where the model has it)."""

    def new_cache(self, batch: int) -> Any:
        """An empty KV cache for `batch` rows."""

    def prefill(self, cache: Any, ids: torch.Tensor, start: int) -> None:
        """Append finished positions start..start+T-1 (ids [B, T], whole blocks) to the cache, exactly."""

    def block_logits(self, cache: Any, ids: torch.Tensor, start: int) -> torch.Tensor:
        """The block ids [B, T] at positions start.. against the cache -> fp32 logits [B, T, V];
        row i predicts the token at start+i. Never proposes the mask token."""

    def newline_ids(self) -> torch.Tensor:
        """[V] bool: tokens whose text contains a line break."""


@torch.no_grad()
def decode_blockwise(port: BlockDiffusionPort, canvas: Canvas, settings: DecodeSettings,
                     should_stop: Callable[[], bool] = lambda: False, on_step: StepCallback | None = None,
                     cache: CacheSettings = CacheSettings()) -> DenoiseOutcome:
    """Fill every slot of `canvas` block by block, `settings.n` candidates; the outcome is laid out on
    `canvas` (span tokens in its slots), as the masked-diffusion loop returns it. `cache` is accepted
    for the engine's loop signature and ignored: the block cache is always exact."""
    special = port.special
    batch = settings.n
    ranges = canvas.slot_ranges
    single_line = list(canvas.single_line) or [False] * len(ranges)
    ids = canvas.ids.tolist()
    widths = [b - a for a, b in ranges]
    offsets = [sum(widths[:k]) for k in range(len(ranges))]
    span = torch.full((batch, sum(widths)), special.mask_id, dtype=torch.long, device=port.device)
    masked = torch.ones_like(span, dtype=torch.bool)
    generator = torch.Generator(device=port.device).manual_seed(settings.seed) if settings.temperature > 0 else None
    loop = _Loop(port, settings, should_stop, generator)
    for k, (a, b) in enumerate(ranges):
        suffix = ids[b:ranges[k + 1][0]] if k + 1 < len(ranges) else ids[b:]
        for later in range(k + 1, len(ranges)):     # the text after the later holes, holes left out
            end = ranges[later + 1][0] if later + 1 < len(ranges) else len(ids)
            suffix = suffix + ids[ranges[later][1]:end]
        seg = slice(offsets[k], offsets[k] + widths[k])

        def report(step: int, part: torch.Tensor, part_masked: torch.Tensor, conf: float, rows=None) -> None:
            rows = slice(None) if rows is None else rows
            span[rows, seg], masked[rows, seg] = part, part_masked
            if on_step is not None:
                on_step(loop.steps, span, masked.clone(), conf, loop.budget)

        if k == 0 or batch == 1:
            prefix = _prefix(ids, ranges, k, span[0], offsets, widths, special)
            out = loop.fill(prefix, suffix, widths[k], batch, single_line[k], report)
            span[:, seg], masked[:, seg] = out, False
            continue
        for row in range(batch):    # earlier slots differ between candidates: their prefixes do too
            prefix = _prefix(ids, ranges, k, span[row], offsets, widths, special)
            out = loop.fill(prefix, suffix, widths[k], 1, single_line[k],
                            lambda s, p, m, c, r=row: report(s, p, m, c, rows=slice(r, r + 1)))
            span[row, seg], masked[row, seg] = out[0], False
    full = canvas.ids.to(port.device)[None].repeat(batch, 1)
    full[:, canvas.span_positions().to(port.device)] = span
    return DenoiseOutcome(full, span, loop.steps, canvas)


def _covered(start: int, bs: int, t0: int, width: int) -> tuple[int, int]:
    """The span offsets [a, b) that the block at `start` covers (the span starts at position t0)."""
    return max(start, t0) - t0, min(start + bs, t0 + width) - t0


def _prefix(ids: list[int], ranges, k: int, span_row: torch.Tensor, offsets, widths, special: SpecialTokens) -> list[int]:
    """Canvas tokens before slot k, with the earlier slots' decoded tokens (cut at their end)."""
    out: list[int] = []
    cursor = 0
    ends = set(special.end_ids)
    for j in range(k):
        a, b = ranges[j]
        out += ids[cursor:a]
        for token in span_row[offsets[j]:offsets[j] + widths[j]].tolist():
            if token in ends or token == special.mask_id:
                break
            out.append(token)
        cursor = b
    return out + ids[cursor:ranges[k][0]]


class _Loop:
    def __init__(self, port: BlockDiffusionPort, settings: DecodeSettings, should_stop, generator) -> None:
        self.port = port
        self.settings = settings
        self.should_stop = should_stop
        self.generator = generator
        special = port.special
        self.end_ids = torch.tensor(special.end_ids or (-1,), device=port.device)
        self.pad_fill = special.end_ids[0] if special.end_ids else special.mask_id
        self.steps = 0
        self.budget = 0     # forward passes allowed so far: `steps` per sub-block entered

    def fill(self, prefix: list[int], suffix: list[int], width: int, batch: int, single_line: bool,
             report: Callable[..., None]) -> torch.Tensor:
        """Decode one span of `width` tokens after `context_ids(prefix, suffix)` -> tokens [batch, width]."""
        port, settings, device = self.port, self.settings, self.port.device
        special = port.special
        if self.should_stop():
            raise Cancelled()
        context = port.context_ids(prefix, suffix)
        t0, bs = len(context), port.block_size
        total = t0 + width
        padded = -(-total // bs) * bs
        seq = torch.full((batch, padded), special.mask_id, dtype=torch.long, device=device)
        seq[:, :t0] = torch.tensor(context, dtype=torch.long, device=device)
        masked = torch.ones(batch, width, dtype=torch.bool, device=device)
        slot_of = torch.zeros(width, dtype=torch.long, device=device)
        collapse = -math.inf if settings.ends_in_order else settings.pad_collapse_threshold
        newlines = port.newline_ids() if single_line else None
        cache = port.new_cache(batch)
        start = (t0 // bs) * bs
        if start:
            port.prefill(cache, seq[:, :start], 0)
        index = torch.arange(width, device=device)
        while start < total and masked.any():
            sub = port.sub_block_size or bs
            for sub_start in range(start, start + bs, sub):
                lo, hi = max(sub_start, t0) - t0, min(sub_start + sub, total) - t0
                if hi <= lo:
                    continue
                active = (index >= lo) & (index < hi)
                self.budget += settings.steps
                for step in range(settings.steps):
                    todo = masked & active
                    if not todo.any():
                        break
                    self._step(cache, seq, start, t0, todo, masked, slot_of, collapse, settings.steps - step, report)
                if (masked & active).any():
                    # The step budget ran out with holes left (ends held back): fill them greedily.
                    a, b = _covered(start, bs, t0, width)
                    best = port.block_logits(cache, seq[:, start:start + bs], start)[:, t0 + a - start:t0 + b - start]
                    self.steps += 1
                    left = (masked & active)[:, a:b]
                    window = seq[:, t0 + a:t0 + b]          # a view: the writes land in seq
                    window[left] = best.argmax(-1)[left]
                    masked[:, a:b] &= ~left
            if newlines is not None:
                # End of line: a row whose span has a line break is finished (the rest becomes pad).
                span = seq[:, t0:total]
                seen = newlines[span.clamp(0, newlines.numel() - 1)] & ~masked
                broken = seen.any(-1, keepdim=True)
                after = broken & masked
                span[after] = self.pad_fill
                seq[:, t0:total] = span
                masked &= ~after
            if start + bs < total and masked.any():
                port.prefill(cache, seq[:, start:start + bs], start)
            start += bs
        return seq[:, t0:total]

    def _step(self, cache, seq, start, t0, todo, masked, slot_of, collapse, steps_left, report) -> None:
        port, settings = self.port, self.settings
        if self.should_stop():
            raise Cancelled()
        bs = port.block_size
        batch, width = masked.shape
        logits = port.block_logits(cache, seq[:, start:start + bs], start)
        self.steps += 1
        a, b = _covered(start, bs, t0, width)
        rows = logits[:, t0 + a - start:t0 + b - start]              # the block's span rows [B, b-a, V]
        token, score = propose(rows.reshape(-1, rows.shape[-1]), settings, self.generator)
        conf = torch.full((batch, width), -math.inf, device=seq.device)
        proposal = torch.full((batch, width), port.special.mask_id, dtype=torch.long, device=seq.device)
        conf[:, a:b] = score.view(batch, -1)
        proposal[:, a:b] = token.view(batch, -1)
        conf = torch.where(todo, conf, -math.inf)
        if settings.ends_in_order:
            commit = choose_commits(hold_back_early_ends(conf, proposal, todo, slot_of, self.end_ids, 1),
                                    todo, settings, steps_left=steps_left)
            at_frontier = hold_back_early_ends(conf, proposal, todo & ~commit, slot_of, self.end_ids, 1)
            commit |= todo & torch.isin(proposal, self.end_ids) & (at_frontier >= settings.threshold)
        else:
            commit = choose_commits(conf, todo, settings, steps_left=steps_left)
        span = seq[:, t0:t0 + width]
        span = torch.where(commit, proposal, span)
        masked &= ~commit
        span, still = collapse_after_pad(span, masked, commit, conf, slot_of, self.end_ids, self.pad_fill, collapse,
                                         n_slots=1)
        masked.copy_(still)
        seq[:, t0:t0 + width] = span
        finite = conf[commit]
        report(self.steps, span, masked.clone(), float(finite.mean()) if finite.numel() else 0.0)

"""The block-by-block decode loop for block-diffusion models (SDAR, LLaDA2.0, Fast-dLLM v2, ...).

These models are causal across blocks of a few tokens and bidirectional inside a block, so a
span is decoded left to right one block at a time: the block's masks are filled by the same
confidence-threshold rules as the masked-diffusion loop (`denoise.choose_commits`, ends decided
in order, a confident end closes the span), then the next block starts. Each block gets the
step budget `settings.steps`.

A finished block joins the model's exact KV cache in the next block's first pass, not in a pass
of its own: that pass runs the finished block's rows and the new block's rows together under
the block-causal mask (the finished rows see only the cache and themselves, so their keys and
values are exactly what a pass of their own would give). One forward pass per block fewer: with
one step per block of 4, half the passes; on a GPU, where a pass costs about its weight reads
whatever its rows, about half the time.

Stop rules: a committed end token (pad / EOS) ends the span (everything after it becomes pad);
a one-line slot stops at the first finished block that contains a line break (post-processing
cuts the line there; which tokens hold one is the engine's token table, `TokenIndex.line_breaks`,
built from the tokenizer like the rest of it, not the model port's); the span's width bounds the rest.

Several slots are filled one after another, left to right: slot k sees the text before it
(earlier slots filled) as prefix and the text after it, without the later holes, as suffix.

Several candidates (alternatives, `DecodeSettings.n`): candidate 0, the one the editor shows
first, leads, and the others cost it no pass, as in the fixed-length loop (denoise.FixedLengthRun).
They are decoded in one batch, and a (sub-)block's steps end when candidate 0 has decided its
part of it: the others' undecided positions there take the tokens that same pass proposed for
them (their last step, as a step budget's last commits everything), and once candidate 0's span
is done (an end, a line break, its width) the others' end too, where they stand. Why: the batch
ran while any candidate had an undecided position, and sampled candidates commit less surely
(more steps a block) and write on past the first's end (more blocks), which it waited for. Only
the last slot has alternatives: the slots before it are candidate 0's, decoded once, alone, and
every candidate's last slot reads them. Why: a candidate's later slot reads its own earlier ones,
so each was decoded alone, once per candidate (n times the passes); in a request of several slots
the last is the cursor's (a companion slot goes first: multisite/companion.py), the one the
alternatives are for. Candidate 0's rows read only its own tokens, and its steps and blocks run
as they do alone, so its text is the one it has alone (n=1). An alternative cut short is
post-processing's to refuse.

`BlockwiseRun` holds one request's loop state and advances one model call at a time, like the
masked-diffusion loop's `FixedLengthRun`, so the step scheduler (engine/batching.py) can give
the steps of several requests one forward pass (`Denoiser.batch_logits` over their `BlockStep`s).
The loop itself is a generator that yields each model call it needs and receives its logits:
the decisions stay in one place, and driving it alone (`decode_blockwise`) or in a shared step
is the caller's choice.

The model side is `BlockDiffusionPort` (engine/denoiser.py, the port module, beside `Denoiser`,
so that a model implementing it imports no loop): context formatting, an exact block cache, the
logits of one block. The loop owns every decision.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any

import torch

from .denoise import (
    CallRun, Commits, DenoiseOutcome, EndGate, ModelCall, StepCallback, StepRows, collapse_after_pad, commit_step,
    constrain, greedy_rows, propose_greedy, run_alone, state_device,
)
from .denoiser import BlockDiffusionPort, BlockStep, Canvas, SpecialTokens
from .span_ends import SpanEnds
from .span_starts import SpanStarts, StartGate, TokenIndex
from .types import CacheSettings, DecodeSettings


class BlockwiseRun(CallRun):
    """One request's block-wise decoding, one model call at a time (see the module docstring).

    Creating it formats the first slot's context; the first model call carries it into the cache
    (the request's context work). `wants_logits`, `session` (a `BlockStep`), `ids`, `rows()`,
    `advance(logits)` and `outcome()` are what the step scheduler and `decode_blockwise` drive, as
    for `FixedLengthRun`. `tokens`: the tokenizer's table (`Engine.token_index`), which a
    one-line slot reads its line breaks from."""

    writes_starts = True

    def __init__(self, port: BlockDiffusionPort, canvas: Canvas, settings: DecodeSettings,
                 on_step: StepCallback | None = None, cache: CacheSettings = CacheSettings(),
                 ends: SpanEnds | None = None, starts: SpanStarts | None = None,
                 tokens: TokenIndex | None = None) -> None:
        # `cache` is accepted for the engine's run signature and ignored: the block cache is always exact.
        super().__init__(_Loop(port, settings, ends, starts, tokens).decode(canvas, on_step))

    @staticmethod
    def planned_rows(port: BlockDiffusionPort, canvas: Canvas, settings: DecodeSettings) -> StepRows:
        """What the first call will carry, before the run exists (the scheduler's group choice):
        the first slot's context blocks and its first block, for each candidate that decodes it
        (every one when it is the only slot, else candidate 0 alone: the module docstring)."""
        ids, ranges = canvas.ids.tolist(), canvas.slot_ranges
        context = port.context_ids(ids[:ranges[0][0]], _suffix(ids, ranges, 0)) if ranges else []
        bs, rows = port.block_size, settings.n if len(ranges) == 1 else 1
        return StepRows(rows * bs, rows * (len(context) // bs) * bs)


@torch.no_grad()
def decode_blockwise(port: BlockDiffusionPort, canvas: Canvas, settings: DecodeSettings,
                     should_stop: Callable[[], bool] = lambda: False, on_step: StepCallback | None = None,
                     cache: CacheSettings = CacheSettings(), ends: SpanEnds | None = None,
                     starts: SpanStarts | None = None, tokens: TokenIndex | None = None) -> DenoiseOutcome:
    """Fill every slot of `canvas` block by block, `settings.n` candidates, one request alone; the
    outcome is laid out on `canvas` (span tokens in its slots), as the masked-diffusion loop
    returns it. `cache` is accepted for the engine's loop signature and ignored; `tokens` is
    needed where a slot is one line (`BlockwiseRun`)."""
    return run_alone(lambda: BlockwiseRun(port, canvas, settings, on_step, ends=ends, starts=starts, tokens=tokens),
                     should_stop)


def _covered(start: int, bs: int, t0: int, width: int) -> tuple[int, int]:
    """The span offsets [a, b) that the block at `start` covers (the span starts at position t0)."""
    return max(start, t0) - t0, min(start + bs, t0 + width) - t0


def _suffix(ids: list[int], ranges, k: int) -> list[int]:
    """Canvas tokens after slot k: the text after the later holes too, the holes left out."""
    ends = [a for a, _ in ranges[k + 1:]] + [len(ids)]
    return [t for (_, b), end in zip(ranges[k:], ends) for t in ids[b:end]]


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


Calls = Generator[ModelCall, torch.Tensor, Any]


class _Loop:
    def __init__(self, port: BlockDiffusionPort, settings: DecodeSettings, ends: SpanEnds | None = None,
                 starts: SpanStarts | None = None, tokens: TokenIndex | None = None) -> None:
        self.port = port
        self.settings = settings
        self.ends = ends
        self.starts = starts
        self.tokens = tokens
        # The sampling runs where the logits are; the loop's own state and decisions where
        # `state_device` says (the host by default, as for the fixed-length loop): a block step's
        # commit rules are a few dozen small ops and scalar reads, launches and syncs on a GPU.
        self.generator = (torch.Generator(device=port.device).manual_seed(settings.seed)
                          if settings.temperature > 0 else None)
        self.host = state_device(port.device)
        special = port.special
        self.end_ids = torch.tensor(special.end_ids or (-1,), device=self.host)
        self.pad_fill = special.end_ids[0] if special.end_ids else special.mask_id
        self.steps = 0
        self.budget = 0     # forward passes allowed so far: `steps` per sub-block entered

    def decode(self, canvas: Canvas, on_step: StepCallback | None) -> Generator[ModelCall, torch.Tensor, DenoiseOutcome]:
        """Every slot of `canvas`, left to right -> the outcome laid out on `canvas`."""
        port, special = self.port, self.port.special
        batch = self.settings.n
        ranges = canvas.slot_ranges
        single_line = list(canvas.single_line) or [False] * len(ranges)
        if any(single_line) and self.tokens is None:
            raise ValueError("a one-line slot needs the tokenizer's TokenIndex (tokens=) for its line breaks")
        ids = canvas.ids.tolist()
        widths = [b - a for a, b in ranges]
        offsets = [sum(widths[:k]) for k in range(len(ranges))]
        span = torch.full((batch, sum(widths)), special.mask_id, dtype=torch.long, device=self.host)
        masked = torch.ones_like(span, dtype=torch.bool)
        confidence = torch.zeros(span.shape, device=self.host)    # each token's, when committed
        for k, (a, b) in enumerate(ranges):
            suffix = _suffix(ids, ranges, k)
            seg = slice(offsets[k], offsets[k] + widths[k])

            def report(part: torch.Tensor, part_masked: torch.Tensor, conf: float) -> None:
                span[:, seg], masked[:, seg] = part, part_masked    # one row (candidate 0's) fills them all
                if on_step is not None:
                    on_step(self.steps, span, masked.clone(), conf, self.budget)

            gate = EndGate.for_run(self.ends, self.settings, port, only_slot=k)
            # Only the last slot has alternatives (the module docstring says why): the ones before
            # it are candidate 0's, decoded once, and every candidate reads them.
            rows = batch if k == len(ranges) - 1 else 1
            prefix = _prefix(ids, ranges, k, span[0], offsets, widths, special)
            out, conf = yield from self.fill(prefix, suffix, widths[k], rows, single_line[k], report, gate,
                                             first_candidate=rows < batch,
                                             starts=StartGate.for_run(self.starts, rows, only_slot=k))
            span[:, seg], masked[:, seg], confidence[:, seg] = out, False, conf
        full = canvas.ids.to(self.host)[None].repeat(batch, 1)
        full[:, canvas.span_positions().to(self.host)] = span
        return DenoiseOutcome(full, span, self.steps, canvas, confidence)

    def fill(self, prefix: list[int], suffix: list[int], width: int, batch: int, single_line: bool,
             report: Callable[..., None], gate: EndGate | None = None, first_candidate: bool = False,
             starts: StartGate | None = None) -> Generator[ModelCall, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Decode one span of `width` tokens after `context_ids(prefix, suffix)` -> (tokens [batch,
        width], the confidence each was committed with [batch, width]). Row 0 is candidate 0, which
        the others follow (the module docstring). `first_candidate`: the one row is candidate 0 of
        several (a slot before the last), greedy under `greedy_first`. `starts`: the slot must
        begin with a typed word (span_starts.py)."""
        port, settings, host = self.port, self.settings, self.host
        special = port.special
        context = port.context_ids(prefix, suffix)
        t0, bs = len(context), port.block_size
        total = t0 + width
        padded = -(-total // bs) * bs
        seq = torch.full((batch, padded), special.mask_id, dtype=torch.long, device=host)
        seq[:, :t0] = torch.tensor(context, dtype=torch.long, device=host)
        masked = torch.ones(batch, width, dtype=torch.bool, device=host)
        committed = torch.zeros(batch, width, device=host)
        slot_of = torch.zeros(width, dtype=torch.long, device=host)
        collapse = -math.inf if settings.ends_in_order else settings.pad_collapse_threshold
        newlines = self.tokens.line_breaks(host) if single_line else None
        # The context's whole blocks join the cache in the first call, with the first block's masks:
        # no pass of their own (and in a shared step, no pass run alone at admission).
        start = (t0 // bs) * bs
        state = _Block(port, port.new_cache(batch), 0)
        index = torch.arange(width, device=host)
        # Candidate 0's span decides when the loop ends: the others stop with it (module docstring).
        while start < total and masked[0].any():
            state.start = start
            sub = port.sub_block_size or bs
            for sub_start in range(start, start + bs, sub):
                lo, hi = max(sub_start, t0) - t0, min(sub_start + sub, total) - t0
                if not masked[0].any():
                    break           # candidate 0 ended in an earlier sub-block of this block
                if hi <= lo:
                    continue
                active = (index >= lo) & (index < hi)
                self.budget += settings.steps
                for step in range(settings.steps):
                    todo = masked & active
                    if not todo.any():
                        break
                    yield from self._step(state, seq, t0, todo, masked, committed, slot_of, collapse,
                                          settings.steps - step, report, gate, first_candidate, starts)
                # A typed start still being written takes one step a token, past the budget if need
                # be (at most one per character typed): the greedy fill would guess what follows it blind.
                while starts is not None and _leader_writes_start(starts) and (masked & active).any():
                    yield from self._step(state, seq, t0, masked & active, masked, committed, slot_of, collapse,
                                          1, report, gate, first_candidate, starts)
                left = masked & active
                if left.any():
                    # The step budget ran out with holes left (ends held back): fill them greedily.
                    best = yield state.call(seq, self._block_rows(left, start, t0), greedy=True)
                    self.steps += 1
                    constrain(best, seq[:, t0:total], left, masked, slot_of, (width,), special.mask_id, gate, starts)
                    token, score = (t.to(host) for t in propose_greedy(best, settings.confidence))
                    seq[:, t0:total][left] = token      # a view: the writes land in seq
                    if starts is not None:
                        starts.record(seq[:, t0:total])
                    committed[left] = score
                    masked &= ~left
            if newlines is not None:
                # End of line: a row whose span has a line break is finished (the rest becomes pad).
                span = seq[:, t0:total]
                seen = newlines[span.clamp(0, newlines.numel() - 1)] & ~masked
                broken = seen.any(-1, keepdim=True)
                after = broken & masked
                span[after] = self.pad_fill
                seq[:, t0:total] = span
                masked &= ~after
            # No pass of its own for the finished block: it joins the cache in the next block's first call.
            start += bs
        span = seq[:, t0:total]
        # Candidate 0 is done: the others end where they stand (their text up to here).
        span[masked] = self.pad_fill
        return span, committed

    def _block_rows(self, todo: torch.Tensor, start: int, t0: int) -> torch.Tensor:
        """[B, width] span positions -> [B, block_size] rows of the block at `start`."""
        bs = self.port.block_size
        a, b = _covered(start, bs, t0, todo.shape[1])
        rows = torch.zeros(todo.shape[0], bs, dtype=torch.bool, device=todo.device)
        rows[:, t0 + a - start:t0 + b - start] = todo[:, a:b]
        return rows

    def _step(self, state: "_Block", seq, t0, todo, masked, committed, slot_of, collapse, steps_left, report,
              gate: EndGate | None, first_candidate: bool = False, starts: StartGate | None = None) -> Calls:
        settings, special = self.settings, self.port.special
        logits = yield state.call(seq, self._block_rows(todo, state.start, t0), greedy=False)
        self.steps += 1
        width = masked.shape[1]
        # The rows are the block's positions `todo` selects, in span order: the same row-major order.
        constrain(logits, seq[:, t0:t0 + width], todo, masked, slot_of, (width,), special.mask_id, gate, starts)
        greedy = int(todo.sum()) if first_candidate and settings.greedy_first else greedy_rows(settings, todo)
        decided = commit_step(logits, seq[:, t0:t0 + width], todo, slot_of, (width,), self.end_ids, special.mask_id,
                              settings, steps_left, self.generator, greedy, self.host, gate, starts)
        commit, proposal, conf = decided.commit, decided.proposal, decided.conf
        span = seq[:, t0:t0 + width]
        span = torch.where(commit, proposal, span)
        committed[commit] = conf[commit]
        masked &= ~commit
        span, still = collapse_after_pad(span, masked, commit, conf, slot_of, self.end_ids, self.pad_fill, collapse,
                                         n_slots=1)
        masked.copy_(still)
        left = todo & masked
        if left.shape[0] > 1 and not bool(left[0].any()) and bool(left.any()):
            span = self._fill_others(span, left, masked, committed, decided, slot_of, collapse, starts)
        seq[:, t0:t0 + width] = span
        finite = conf[commit]
        report(span, masked.clone(), float(finite.mean()) if finite.numel() else 0.0)

    def _fill_others(self, span: torch.Tensor, left: torch.Tensor, masked: torch.Tensor, committed: torch.Tensor,
                     decided: Commits, slot_of: torch.Tensor, collapse: float, starts: StartGate | None) -> torch.Tensor:
        """Candidate 0 has decided its part of the (sub-)block: what the others left undecided there
        (`left` [B, width]) takes the tokens this step proposed for it, with their confidence, as a
        step budget's last step commits everything (no pass of its own; the module docstring says
        why). A filled end closes its candidate's span; a candidate still writing a typed start
        gives it up, as the rule does where it cannot go on (StartGate.restrict). -> the span."""
        span = torch.where(left, decided.proposal, span)
        committed[left] = decided.score[left]
        masked &= ~left
        span, still = collapse_after_pad(span, masked, left, decided.score, slot_of, self.end_ids, self.pad_fill,
                                         collapse, n_slots=1)
        masked.copy_(still)
        if starts is not None:
            for row in left.any(-1).nonzero().flatten().tolist():
                starts.rest[row] = [""] * len(starts.rest[row])
        return span


def _leader_writes_start(starts: StartGate) -> bool:
    """Whether candidate 0 is still writing its typed start (a step a token past the budget): the
    others' starts never hold it up, nor make its steps differ from its steps alone (a greedy fill
    where it has none to write)."""
    return any(starts.rest[0])


class _Block:
    """Where one span's decoding stands: its cache, the positions already in it, the current block."""

    def __init__(self, port: BlockDiffusionPort, cache: Any, cached: int) -> None:
        self.port, self.cache, self.cached, self.start = port, cache, cached, cached

    def call(self, seq: torch.Tensor, rows: torch.Tensor, greedy: bool) -> ModelCall:
        """The next model call: the finished blocks since the last call, then the current block,
        copied to the model's device (the loop's state may live on the host: state_device).
        After it, the cache holds everything before the current block."""
        end, device = self.start + self.port.block_size, self.port.device
        call = ModelCall(BlockStep(self.port, self.cache, self.cached), seq[:, self.cached:end].to(device),
                         rows.to(device), greedy, context_rows=seq.shape[0] * (self.start - self.cached))
        self.cached = self.start
        return call

"""Variable-length decoding (DreamOn): slots grow and shrink while they are denoised.

DreamOn was trained so that, inside a masked span,
- predicting the expand token (`<|expand|>`) means "this position needs more room": the
  position becomes two masks;
- predicting the delete token (`SpecialTokens.delete_id`: delete_token_id where a config names
  one, else EOS, with which DreamOn-v0 pads the middle in training) means "this position does
  not exist": the position is removed, and (the reference's `pad_delete_to_right`) every
  still-masked position after it in the span is removed too.
The canvas is `[BOS] prefix [MASK]*k suffix [EOS]`; a slot starts with a few masks and grows up
to its `max_tokens`. Expansion is blocked when a slot is full and at the last step, so the loop
still ends within `settings.steps` forward passes.

Because a resize moves every later position, the model's cached context is refreshed after it
(a new session); steps without a resize use the session's cache as usual. The model itself is
only asked for logits: the rules above are decoding, so they live here, in the engine.

Several candidates (alternatives, `DecodeSettings.n`) run one after another, each in its own
layout (their resizes differ, so they share no pass): candidate 0 first, as it runs alone (n=1,
its text the same), then the alternatives, which share among them the model calls candidate 0
took: each gets a step budget of an equal share of what is left (at least one step; a budget's
last step commits every mask left and may not expand, so a candidate takes at most its budget).
The alternatives thus take at most as many calls as candidate 0, or one each where it took fewer
(two with a commit cap, `max_per_step`, whose masks left take a greedy fill). Why: each ran a
whole decode of `settings.steps` steps, so the first suggestion, which comes back with them,
waited for n whole decodes. An alternative on a small budget has fewer steps to grow in and
commits more tokens a step: post-processing refuses what it cannot use.
"""
from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import Any

import torch

from .denoise import (
    CallRun, DenoiseOutcome, ModelCall, StepCallback, StepRows, choose_commits, never_mask, propose, state_device,
)
from .denoiser import Canvas, Denoiser, SpecialTokens
from .span_ends import SpanEnds
from .span_starts import SpanStarts
from .types import CacheSettings, DecodeSettings

INITIAL_MASKS = 8   # masks a slot starts with (DreamOn's demo starts from 4 and lets the model grow it)


@dataclass
class Layout:
    """Context pieces around the slots, and each slot's current tokens (mask id where still masked)."""

    pieces: list[list[int]]
    slots: list[list[int]]
    widths: list[int]             # the most tokens each slot may grow to

    def canvas(self) -> Canvas:
        ids: list[int] = list(self.pieces[0])
        ranges = []
        for slot, after in zip(self.slots, self.pieces[1:]):
            ranges.append((len(ids), len(ids) + len(slot)))
            ids += slot
            ids += after
        return Canvas(torch.tensor(ids, dtype=torch.long), ranges)


def initial_width(width: int, initial_masks: int = INITIAL_MASKS) -> int:
    """Masks a slot of at most `width` tokens starts with."""
    return max(1, min(width, initial_masks))


def initial_layout(canvas: Canvas, special: SpecialTokens, initial_masks: int = INITIAL_MASKS) -> Layout:
    ids = canvas.ids.tolist()
    cuts = [0]
    for a, b in canvas.slot_ranges:
        cuts += [a, b]
    cuts.append(len(ids))
    pieces = [ids[cuts[i]:cuts[i + 1]] for i in range(0, len(cuts), 2)]
    pieces[-1] = pieces[-1] + [special.eos_id]      # the reference closes the canvas with EOS
    widths = [b - a for a, b in canvas.slot_ranges]
    slots = [[special.mask_id] * initial_width(w, initial_masks) for w in widths]
    return Layout(pieces, slots, widths)


class VariableLengthRun(CallRun):
    """One request's variable-length decoding, one model call at a time (`CallRun`): the step
    scheduler (engine/batching.py) gives concurrent requests' cached steps one forward pass
    (`Denoiser.batch_logits`), as for `FixedLengthRun`. Candidates run one after another
    (their layouts diverge), the alternatives within the calls candidate 0 took (module docstring)."""

    writes_starts = False    # no frontier to write a start at (below): no token healing either

    def __init__(self, denoiser: Denoiser, canvas: Canvas, settings: DecodeSettings,
                 on_step: StepCallback | None = None, cache: CacheSettings = CacheSettings(),
                 ends: SpanEnds | None = None, starts: SpanStarts | None = None) -> None:
        # `ends` and `starts` are accepted for the engine's run signature and not applied: DreamOn
        # deletes and inserts positions anywhere in a span, so there is no frontier where "the text
        # so far" is known (a typed word's start is left to post-processing, as before).
        super().__init__(_candidates(denoiser, canvas, settings, on_step, cache))

    @staticmethod
    def planned_rows(denoiser: Denoiser, canvas: Canvas, settings: DecodeSettings) -> StepRows:
        """What a step will carry, before the run exists (the scheduler's group choice)."""
        return StepRows(sum(initial_width(width) for width in canvas.widths))

    @property
    def step_rows(self) -> StepRows:
        return StepRows(int(self._call.rows.numel()) if self._call is not None else 0)


Calls = Generator[ModelCall, torch.Tensor, Any]


def _candidates(denoiser: Denoiser, canvas: Canvas, settings: DecodeSettings, on_step, cache: CacheSettings) -> Calls:
    first = replace(settings, n=1)
    if settings.greedy_first:
        first = replace(first, temperature=0.0)      # the alternatives are sampled, the first is greedy
    layout, calls = yield from _run_one(denoiser, canvas, first, on_step, cache)
    finals = [layout]
    left = calls            # the alternatives' calls: what candidate 0 took (module docstring)
    for candidate in range(1, settings.n):
        share = max(1, left // (settings.n - candidate))
        one = replace(settings, n=1, seed=settings.seed + candidate, steps=_steps_within(share, settings))
        layout, used = yield from _run_one(denoiser, canvas, one, None, cache)
        finals.append(layout)
        calls += used
        left -= used
    return _outcome(finals, calls, denoiser.special, state_device(denoiser.device))


def _steps_within(calls: int, settings: DecodeSettings) -> int:
    """The step budget of a candidate allowed `calls` model calls (at least one step, at most
    `settings.steps`): one less with a commit cap (`max_per_step`), whose masks left at the last
    step take a greedy fill (`_fill_left`)."""
    fill = 1 if settings.max_per_step is not None else 0
    return max(1, min(settings.steps, calls - fill))


def _run_one(denoiser: Denoiser, canvas: Canvas, settings: DecodeSettings, on_step,
             cache: CacheSettings) -> Calls:
    """One candidate's decode -> (its final layout, the model calls it took)."""
    # The layout is host lists; the step's masks, proposals and commits are on the run's own device
    # (state_device: the host by default), the model's inputs copied to its device and the chosen
    # tokens and confidences copied back, one sync a step.
    special, device, host = denoiser.special, denoiser.device, state_device(denoiser.device)
    layout = initial_layout(canvas, special)
    generator = torch.Generator(device=device).manual_seed(settings.seed) if settings.temperature > 0 else None
    session = None
    steps = 0
    for step in range(settings.steps):
        now = layout.canvas()
        masked = torch.tensor([t == special.mask_id for slot in layout.slots for t in slot], device=host)
        if not masked.any():
            break
        ids = now.ids[None].to(device)
        if session is None:
            session = denoiser.open_session(now, 1, cache)
        steps_left = settings.steps - step
        logits = yield ModelCall(session, ids, masked[None].to(device), greedy=False)   # [R, V]: the masked rows
        steps += 1
        held = no_expansion(layout, steps_left).to(host)[masked]   # rows of the logits, as a mask of the run's
        logits[held, special.expand_id] = float("-inf")
        never_mask(logits, special.mask_id)     # a mask is no answer, whatever the model scores it
        token, score = (t.to(host) for t in propose(logits, settings, generator))
        conf = torch.full((masked.numel(),), -math.inf, device=host)
        conf[masked] = score
        proposal = torch.full_like(masked, special.mask_id, dtype=torch.long)
        proposal[masked] = token
        commit = choose_commits(conf[None], masked[None], settings, steps_left)[0]
        flat = torch.where(commit, proposal, torch.tensor([t for s in layout.slots for t in s], device=host))
        if apply_resizes(layout, flat.tolist(), commit.tolist(), special):
            session = None           # positions moved: recompute the context at the next step
        if on_step is not None:
            span, still = _project(layout, special)
            done = conf[commit]
            on_step(steps, span, still, float(done.mean()) if done.numel() else 0.0, settings.steps)
    filled = yield from _fill_left(denoiser, layout, cache)
    return layout, steps + filled


def _fill_left(denoiser: Denoiser, layout: Layout, cache: CacheSettings) -> Calls:
    """Masks left when the step budget ran out (only if a step was skipped): the argmax, no
    resizing. -> the model calls it took (0 or 1)."""
    special = denoiser.special
    flat = [t for slot in layout.slots for t in slot]
    masked = torch.tensor([t == special.mask_id for t in flat])
    if not masked.any():
        return 0
    now, device = layout.canvas(), denoiser.device
    session = denoiser.open_session(now, 1, cache)
    logits = yield ModelCall(session, now.ids[None].to(device), masked[None].to(device), greedy=True)
    logits[:, special.expand_id] = float("-inf")
    never_mask(logits, special.mask_id)        # a mask filled in would be a hole left in the span
    best = iter(logits.argmax(-1).tolist())
    filled = [next(best) if t == special.mask_id else t for t in flat]
    apply_resizes(layout, filled, masked.tolist(), special)
    return 1


def no_expansion(layout: Layout, steps_left: int) -> torch.Tensor:
    """[S] bool: span rows that may not expand: a full slot's, and every row at the last step
    (masks made then could never be filled)."""
    flags: list[bool] = []
    for slot, width in zip(layout.slots, layout.widths):
        flags += [steps_left <= 1 or len(slot) >= width] * len(slot)
    return torch.tensor(flags, dtype=torch.bool)


def apply_resizes(layout: Layout, flat: list[int], commit: list[bool], special: SpecialTokens) -> bool:
    """Write this step's commits into the slots, then apply the delete and expand rules.
    Returns whether any slot changed length."""
    # The delete token, and EOS / pad: inside a span they all mean "no token here".
    delete_ids = {special.delete_id, special.eos_id, special.pad_id} - {None}
    resized = False
    offset = 0
    for i, slot in enumerate(layout.slots):
        n = len(slot)
        tokens, fresh = flat[offset:offset + n], commit[offset:offset + n]
        offset += n
        deletes = [j for j in range(n) if fresh[j] and tokens[j] in delete_ids]
        if deletes:
            # pad_delete_to_right: every mask after the first delete is deleted with it.
            first = deletes[0]
            gone = {j for j in range(n) if j in deletes or (j > first and tokens[j] == special.mask_id)}
            tokens = [t for j, t in enumerate(tokens) if j not in gone]
            fresh = [f for j, f in enumerate(fresh) if j not in gone]
            resized = True
        grown: list[int] = []
        room = layout.widths[i] - len(tokens)
        for t, f in zip(tokens, fresh):
            if f and t == special.expand_id:
                if room > 0:
                    grown += [special.mask_id, special.mask_id]
                    room -= 1
                    resized = True
                else:
                    grown.append(special.mask_id)     # no room left: the position is just re-opened
            else:
                grown.append(t)
        layout.slots[i] = grown     # may be empty: the model deleted every position
    return resized


def _project(layout: Layout, special: SpecialTokens) -> tuple[torch.Tensor, torch.Tensor]:
    """The slots laid out at their full widths (end-padded), as the engine's step callback expects."""
    span: list[int] = []
    for slot, width in zip(layout.slots, layout.widths):
        span += slot + [special.eos_id] * (width - len(slot))
    ids = torch.tensor([span], dtype=torch.long)
    return ids, ids == special.mask_id


def _outcome(layouts: list[Layout], steps: int, special: SpecialTokens, device: torch.device) -> DenoiseOutcome:
    """Candidates may end with different slot lengths: pad each slot to the longest with EOS."""
    widths = [max(len(lay.slots[i]) for lay in layouts) for i in range(len(layouts[0].slots))]
    rows = []
    for lay in layouts:
        padded = Layout(lay.pieces, [s + [special.eos_id] * (w - len(s)) for s, w in zip(lay.slots, widths)],
                        lay.widths)
        rows.append(padded.canvas())
    canvas = rows[0]
    ids = torch.stack([c.ids for c in rows]).to(device)
    span_pos = canvas.span_positions().to(device)
    return DenoiseOutcome(ids, ids[:, span_pos], steps, canvas)

"""DreamOn: Dream with variable-length slots (expand and delete), following its reference sampler.

DreamOn was trained so that, inside a masked span,
- predicting the expand token (`<|expand|>`, 151667) means "this position needs more room":
  the position becomes two masks;
- predicting the delete token (`delete_token_id` where a config names one, else EOS, with
  which DreamOn-v0 pads the middle in training) means "this position does not exist": the
  position is removed, and (the reference's `pad_delete_to_right`) every still-masked
  position after it in the span is removed too.
The canvas is `[BOS] prefix [MASK]*k suffix [EOS]`; a slot starts with a few masks and grows
up to its `max_tokens`. Expansion is blocked when a slot is full and at the last step, so the
loop still ends within `settings.steps` forward passes.

Because a resize moves every later position, the cached context is refreshed after it
(a new session); steps without a resize use the dual cache as usual.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from dllm_lsp.engine.denoise import Cancelled, DenoiseOutcome, choose_commits, confidence_of
from dllm_lsp.engine.denoiser import Canvas
from dllm_lsp.kernels.unmask_select import unmask_select

from .denoiser import CheckpointDenoiser


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


class DreamOnDenoiser(CheckpointDenoiser):
    initial_masks = 8   # masks a slot starts with (DreamOn's demo starts from 4 and lets the model grow it)
    delete_id: int | None = None    # set by the loader: delete_token_id, a <|delete|> token, or EOS

    def initial_layout(self, canvas: Canvas) -> Layout:
        ids = canvas.ids.tolist()
        cuts = [0]
        for a, b in canvas.slot_ranges:
            cuts += [a, b]
        cuts.append(len(ids))
        pieces = [ids[cuts[i]:cuts[i + 1]] for i in range(0, len(cuts), 2)]
        pieces[-1] = pieces[-1] + [self.special.eos_id]      # the reference closes the canvas with EOS
        widths = [b - a for a, b in canvas.slot_ranges]
        slots = [[self.special.mask_id] * max(1, min(w, self.initial_masks)) for w in widths]
        return Layout(pieces, slots, widths)

    def run(self, canvas, settings, should_stop, on_step):
        finals = []
        steps = 0
        for candidate in range(settings.n):
            one = replace(settings, n=1, seed=settings.seed + candidate)
            layout, used = self._run_one(canvas, one, should_stop, on_step if candidate == 0 else None)
            finals.append(layout)
            steps = max(steps, used)      # denoising steps per candidate (candidates run one after another)
        return self._outcome(finals, steps)

    def _run_one(self, canvas: Canvas, settings, should_stop, on_step) -> tuple[Layout, int]:
        special = self.special
        layout = self.initial_layout(canvas)
        generator = torch.Generator(device=self.device).manual_seed(settings.seed) if settings.temperature > 0 else None
        session = None
        steps = 0
        for step in range(settings.steps):
            if should_stop():
                raise Cancelled()
            now = layout.canvas()
            masked = torch.tensor([t == special.mask_id for slot in layout.slots for t in slot], device=self.device)
            if not masked.any():
                break
            if session is None:
                session = self.session(now, 1)
            logits = session.logits(now.ids[None].to(self.device))[0]            # [S, V]
            steps += 1
            steps_left = settings.steps - step
            self._limit_expansion(logits, layout, steps_left)
            rows = masked.nonzero()[:, 0]
            sel = unmask_select(logits[rows], settings.temperature, generator)
            conf = torch.full((masked.numel(),), -math.inf, device=self.device)
            conf[rows] = confidence_of(settings.confidence, sel.prob, sel.margin, sel.entropy).float()
            proposal = torch.full_like(masked, special.mask_id, dtype=torch.long)
            proposal[rows] = sel.token
            commit = choose_commits(conf[None], masked[None], settings, steps_left)[0]
            flat = torch.where(commit, proposal, torch.tensor([t for s in layout.slots for t in s], device=self.device))
            resized = self._apply(layout, flat.tolist(), commit.tolist())
            if resized:
                session = None           # positions moved: recompute the context at the next step
            if on_step is not None:
                span, still = self._project(layout)
                done = conf[commit]
                on_step(steps, span, still, float(done.mean()) if done.numel() else 0.0)
        self._fill_left(layout)
        return layout, steps

    def _fill_left(self, layout: Layout) -> None:
        """Masks left when the step budget ran out (only if a step was skipped): the argmax, no resizing."""
        special = self.special
        if not any(t == special.mask_id for slot in layout.slots for t in slot):
            return
        now = layout.canvas()
        logits = self.session(now, 1).logits(now.ids[None].to(self.device))[0]
        logits[:, special.expand_id] = float("-inf")
        best = logits.argmax(-1).tolist()
        flat = [t for slot in layout.slots for t in slot]
        filled = [b if t == special.mask_id else t for t, b in zip(flat, best)]
        self._apply(layout, filled, [t == special.mask_id for t in flat])

    def _limit_expansion(self, logits: torch.Tensor, layout: Layout, steps_left: int) -> None:
        """No expansion in a full slot, nor at the last step (masks made then could never be filled)."""
        expand = self.special.expand_id
        offset = 0
        for slot, width in zip(layout.slots, layout.widths):
            if steps_left <= 1 or len(slot) >= width:
                logits[offset:offset + len(slot), expand] = float("-inf")
            offset += len(slot)

    def _apply(self, layout: Layout, flat: list[int], commit: list[bool]) -> bool:
        """Write this step's commits into the slots, then apply the delete and expand rules."""
        special = self.special
        # The delete token, and EOS / pad: inside a span they all mean "no token here".
        delete_ids = {self.delete_id, special.eos_id, special.pad_id} - {None}
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

    def _project(self, layout: Layout) -> tuple[torch.Tensor, torch.Tensor]:
        """The slots laid out at their full widths (end-padded), as the engine's step callback expects."""
        fill = self.special.eos_id
        span: list[int] = []
        for slot, width in zip(layout.slots, layout.widths):
            span += slot + [fill] * (width - len(slot))
        ids = torch.tensor([span], dtype=torch.long)
        return ids, ids == self.special.mask_id

    def _outcome(self, layouts: list[Layout], steps: int) -> DenoiseOutcome:
        """Candidates may end with different slot lengths: pad each slot to the longest with EOS."""
        fill = self.special.eos_id
        widths = [max(len(lay.slots[i]) for lay in layouts) for i in range(len(layouts[0].slots))]
        rows = []
        for lay in layouts:
            padded = Layout(lay.pieces, [s + [fill] * (w - len(s)) for s, w in zip(lay.slots, widths)], lay.widths)
            rows.append(padded.canvas())
        canvas = rows[0]
        ids = torch.stack([c.ids for c in rows]).to(self.device)
        span_pos = canvas.span_positions().to(self.device)
        return DenoiseOutcome(ids, ids[:, span_pos], steps, canvas)

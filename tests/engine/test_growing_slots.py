"""Slots that start narrow and grow (DecodeSettings.slot_start_tokens, FixedLengthRun).

A denoiser whose logits the test writes: at each slot position it proposes the next token of a
target text (then the end), confidently, so every step's outcome is known exactly. The real
model runs in test_engine.py and the scheduler tests (their 20-token slots grow).
"""
from __future__ import annotations

import pytest
import torch
from tokenizers import Tokenizer, models

from dllm_lsp.engine.canvas import build_canvas
from dllm_lsp.engine.denoise import FixedLengthRun, denoise
from dllm_lsp.engine.denoiser import Canvas, Denoiser, SpecialTokens
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import GROWING_SLOT_START, DecodeSettings, InfillRequest, Slot
from dllm_lsp.loader import load_model

MASK, PAD, CTX = 0, 1, 2
VOCAB = 64          # tokens 3.. are "words"
SURE = DecodeSettings(steps=4, threshold=0.9)


class TargetDenoiser(Denoiser):
    """Proposes targets[candidate][slot][j] at position j of each slot (PAD past the target's
    end) with probability 0.95. Records every canvas a session was opened on."""

    family = "scripted"
    name = "target"

    def __init__(self, targets: list[list[list[int]]]) -> None:
        vocab = {"<mask>": MASK, "<pad>": PAD, "ctx": CTX, **{f"w{i}": i for i in range(3, VOCAB)}}
        self.tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<mask>"))
        self.special = SpecialTokens(mask_id=MASK, pad_id=PAD)
        self.device = torch.device("cpu")
        self.max_context = 256
        self.targets = targets
        self.canvases: list[Canvas] = []

    def session(self, canvas, batch, cache=None):
        outer = self
        outer.canvases.append(canvas)

        class Session:
            def logits(self, ids, wanted=None):
                rows = []
                for b in range(ids.shape[0]):
                    per_row = []
                    for slot, (a, e) in enumerate(canvas.slot_ranges):
                        target = outer.targets[b][slot]
                        for j in range(e - a):
                            probs = torch.full((VOCAB,), 0.05 / (VOCAB - 1))
                            probs[target[j] if j < len(target) else PAD] = 0.95
                            per_row.append(probs.log())
                    rows.append(torch.stack(per_row))
                out = torch.stack(rows)
                return out if wanted is None else out[wanted]

        return Session()


def canvas_of(widths: list[int], start: int | None) -> Canvas:
    """[ctx] slot [ctx ctx] slot ... with each slot `start` wide (capacity `widths`)."""
    ids, ranges = [CTX], []
    for w in widths:
        width = w if start is None else min(w, start)
        ranges.append((len(ids), len(ids) + width))
        ids += [MASK] * width + [CTX, CTX]
    canvas = Canvas(torch.tensor(ids), ranges)
    if start is not None and canvas.widths != tuple(widths):
        canvas.max_widths = tuple(widths)
    return canvas


def words(n: int, first: int = 3) -> list[int]:
    return list(range(first, first + n))


def span_tokens(outcome, slot: int, row: int = 0) -> list[int]:
    widths = outcome.canvas.widths
    offset = sum(widths[:slot])
    return [t for t in outcome.span_ids[row, offset:offset + widths[slot]].tolist() if t != PAD]


def test_a_slot_the_model_fills_doubles_until_the_span_ends():
    denoiser = TargetDenoiser([[words(20)]])
    reports = []
    outcome = denoise(denoiser, canvas_of([40], start=8), SURE,
                      on_step=lambda step, span, masked, conf, budget: reports.append((step, span.shape[1], budget)))
    assert span_tokens(outcome, 0) == words(20)
    assert outcome.canvas.widths == (32,)                       # 8 -> 16 -> 32, ended at 20
    assert [c.widths for c in denoiser.canvases] == [(8,), (16,), (32,)]
    assert outcome.steps == 3                                    # one confident pass per window
    # Reports are laid out at the slot's capacity, and the budget grows by `steps` per growth.
    assert reports == [(1, 40, 4), (2, 40, 8), (3, 40, 12)]


def test_growth_moves_the_context_after_the_slot_and_keeps_what_was_decided():
    denoiser = TargetDenoiser([[words(10)]])
    denoise(denoiser, canvas_of([24], start=6), SURE)
    first, second = denoiser.canvases[0], denoiser.canvases[1]
    assert first.ids.tolist() == [CTX] + [MASK] * 6 + [CTX, CTX]
    # The decided tokens stay in place; new positions are masks; the context after moved right.
    assert second.slot_ranges == [(1, 13)]
    assert second.ids[second.slot_ranges[0][1]:].tolist() == [CTX, CTX]
    assert second.max_widths == (24,)


def test_a_slot_never_grows_past_its_capacity():
    denoiser = TargetDenoiser([[words(30)]])
    outcome = denoise(denoiser, canvas_of([12], start=8), SURE)
    assert outcome.canvas.widths == (12,)
    assert span_tokens(outcome, 0) == words(12)                  # cut at the slot's most tokens
    assert [c.widths for c in denoiser.canvases] == [(8,), (12,)]


def test_only_the_slot_that_filled_grows():
    denoiser = TargetDenoiser([[words(3), words(12, first=20)]])
    outcome = denoise(denoiser, canvas_of([16, 16], start=8), SURE)
    assert outcome.canvas.widths == (8, 16)
    assert span_tokens(outcome, 0) == words(3)
    assert span_tokens(outcome, 1) == words(12, first=20)


def test_candidates_whose_slot_had_ended_get_ends_not_masks():
    # Candidate 0 needs 10 tokens, candidate 1 ends after 3: the slot grows for both (candidate
    # 0 filled it: test_alternatives_passes.py), but only candidate 0 has anything left to decide.
    denoiser = TargetDenoiser([[words(10, first=30)], [words(3)]])
    run = FixedLengthRun(denoiser, canvas_of([16], start=8), DecodeSettings(steps=4, threshold=0.9, n=2))
    run.advance(run.session.logits(run.ids, run.rows()))
    assert run.wants_logits()                                   # grew
    assert run.canvas.widths == (16,)
    assert run.masked[0].tolist() == [False] * 8 + [True] * 8
    assert run.masked[1].tolist() == [False] * 16
    assert run.ids[1, run.span_pos].tolist()[8:] == [PAD] * 8
    while run.wants_logits():
        run.advance(run.session.logits(run.ids, run.rows()))
    outcome = run.outcome()
    assert span_tokens(outcome, 0, row=0) == words(10, first=30)
    assert span_tokens(outcome, 0, row=1) == words(3)


def test_a_full_width_canvas_never_grows():
    denoiser = TargetDenoiser([[words(20)]])
    outcome = denoise(denoiser, canvas_of([8], start=None), SURE)
    assert outcome.canvas.widths == (8,)
    assert len(denoiser.canvases) == 1


def test_widening_rejects_shrinking_or_overflowing():
    canvas = canvas_of([16], start=8)
    with pytest.raises(ValueError):
        canvas.widened((4,), PAD)
    with pytest.raises(ValueError):
        canvas.widened((20,), PAD)


def test_the_canvas_leaves_room_for_the_full_width():
    """Context is cut for the slot's most tokens, so a grown canvas still fits the model."""
    denoiser = TargetDenoiser([[words(1)]])
    denoiser.max_context = 40
    request = InfillRequest([" ".join(["ctx"] * 60), ""], [Slot(24)])
    narrow = build_canvas(denoiser, request, 1000, start_tokens=8)
    full = build_canvas(denoiser, request, 1000)
    assert narrow.widths == (8,) and narrow.max_widths == (24,)
    assert narrow.length + 16 == full.length <= denoiser.max_context
    assert narrow.widened((24,), MASK).ids.tolist() == full.ids.tolist()


def test_slot_start_tokens_must_not_be_negative():
    with pytest.raises(ValueError):
        DecodeSettings(slot_start_tokens=-1)


def test_slots_start_narrow_unless_asked_otherwise(tiny_model_dir):
    """Growing pays on a CPU (a step costs in proportion to its rows) and on the H200 (fewer steps)."""
    engine = Engine(load_model(tiny_model_dir, "cpu"), batching=False)
    assert engine.start_tokens(DecodeSettings()) == GROWING_SLOT_START        # the default
    assert engine.start_tokens(DecodeSettings(slot_start_tokens=0)) is None    # full width, asked for
    assert engine.start_tokens(DecodeSettings(slot_start_tokens=8)) == 8
    request = InfillRequest.single("x = ", "\n", 40)
    assert engine.canvas(request, start_tokens=engine.start_tokens(DecodeSettings())).widths == (16,)


def test_the_real_model_streams_at_full_width_and_reports_the_grown_budget(tiny_model_dir):
    engine = Engine(load_model(tiny_model_dir, "cpu"), batching=False)
    request = InfillRequest.single("def f(x):\n    return ", "\n", 24)
    states = []
    # threshold 1.0: one commit per step, so the random model fills its 8-token start and grows.
    result = engine.infill(request, DecodeSettings(steps=8, threshold=1.0, slot_start_tokens=8),
                           on_step=states.append)
    assert result.steps > 8
    assert states[-1].total_steps > 8 and states[0].total_steps == 8
    assert all(s.step <= s.total_steps for s in states)
    full = engine.infill(request, DecodeSettings(steps=8, threshold=1.0, slot_start_tokens=0))
    assert full.steps <= 8
    assert len(engine.denoiser.encode(result.text)) <= 24


def test_the_greedy_fill_never_writes_the_mask_token():
    """The last pass of a window fills what is left with the argmax, the mask id excluded."""
    denoiser = TargetDenoiser([[words(2)]])
    run = FixedLengthRun(denoiser, canvas_of([4], start=None), DecodeSettings(steps=1))
    run.step_index = 1                                       # the budget is spent, every position open
    assert run.needs_greedy_fill
    logits = torch.zeros(4, VOCAB)
    logits[:, MASK] = 10.0                                   # the model's favourite is the mask
    logits[:, 7] = 5.0
    run.advance(logits)
    assert run.ids[0, run.span_pos].tolist() == [7, 7, 7, 7]
    assert not run.wants_logits()

"""Alternatives (several candidates, `DecodeSettings.n`) cost the first candidate at most one pass
(FixedLengthRun's class docstring): the others stop when it has decided its window, and slots
grow only where it filled them. Scripted denoisers make each step's outcome known; the shipped
CPU model shows the bound where its sampled candidates took up to 32 passes against 6.
"""
from __future__ import annotations

import pytest
import torch

from dllm_lsp.engine.denoise import FixedLengthRun, denoise
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model, shipped_models_dir

from .test_growing_slots import TargetDenoiser, canvas_of, span_tokens, words

# The most passes a request with alternatives takes beyond its first candidate's alone: the
# greedy fill of what the others left undecided.
EXTRA_PASSES = 1


class UnsureDenoiser(TargetDenoiser):
    """TargetDenoiser whose candidates after the first propose their targets unsurely (about
    0.35, under any threshold here): they commit only the step floor's tokens each step."""

    def session(self, canvas, batch, cache=None):
        inner = super().session(canvas, batch, cache)

        class Session:
            def logits(self, ids, wanted=None):
                out = inner.logits(ids)
                out[1:] = torch.log_softmax(out[1:] * 0.5, dim=-1)
                return out if wanted is None else out[wanted]

        return Session()


def test_the_others_get_one_greedy_fill_once_the_first_has_decided():
    targets = [[words(3)], [words(8, first=30)]]
    alone = denoise(UnsureDenoiser(targets[:1]), canvas_of([8], start=None), DecodeSettings(steps=4))
    both = denoise(UnsureDenoiser(targets), canvas_of([8], start=None), DecodeSettings(steps=4, n=2))
    assert alone.steps == 1
    assert both.steps == alone.steps + EXTRA_PASSES          # not the others' 4 steps
    assert span_tokens(both, 0, row=0) == span_tokens(alone, 0) == words(3)
    assert span_tokens(both, 0, row=1) == words(8, first=30)    # the fill decided the rest


def test_a_slot_only_the_others_filled_does_not_grow():
    denoiser = TargetDenoiser([[words(3)], [words(10, first=30)]])
    outcome = denoise(denoiser, canvas_of([16], start=8), DecodeSettings(steps=4, threshold=0.9, n=2))
    assert outcome.canvas.widths == (8,)
    assert len(denoiser.canvases) == 1              # candidate 0's canvas never widened
    assert span_tokens(outcome, 0, row=0) == words(3)
    assert span_tokens(outcome, 0, row=1) == words(8, first=30)     # cut at the width: post-processing's call


def test_what_the_others_left_undecided_carries_into_the_first_ones_growth():
    # Candidate 0 fills its 8 tokens in a step and grows; candidate 1, unsure, has decided 2 of
    # its 8 by then: its 6 undecided positions stay masks in the wider window, beside 8 new ones.
    denoiser = UnsureDenoiser([[words(12)], [words(16, first=30)]])
    run = FixedLengthRun(denoiser, canvas_of([16], start=8), DecodeSettings(steps=4, n=2))
    run.advance(run.session.logits(run.ids, run.rows()))
    assert run.wants_logits()
    assert run.canvas.widths == (16,)
    assert run.masked[0].tolist() == [False] * 8 + [True] * 8
    assert run.masked[1].tolist() == [False] * 2 + [True] * 14
    while run.wants_logits():
        run.advance(run.session.logits(run.ids, run.rows()))
    outcome = run.outcome()
    assert run.steps == 2 + EXTRA_PASSES          # a step per window, and the others' fill
    assert span_tokens(outcome, 0, row=0) == words(12)
    assert span_tokens(outcome, 0, row=1) == words(16, first=30)


PROMPTS = [
    "import math\n\n\ndef area(radius):\n    return math.pi * radius ** 2\n\n\n"
    "def perimeter(radius):\n    return 2 * math.",
    "def fib(n):\n    if n < 2:\n        return n\n    return ",
]


@pytest.fixture(scope="module")
def preview():
    engine = Engine(load_model(str(shipped_models_dir() / "dllm-embedded-3m-cpu-preview"), "cpu"))
    yield engine
    engine.close()


@pytest.mark.parametrize("prefix", PROMPTS)
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_the_shipped_models_alternatives_keep_the_first_ones_passes_and_text(preview, prefix, temperature):
    request = InfillRequest.single(prefix, "\n", 32, single_line=True, language="python")
    alone = preview.infill(request, DecodeSettings())
    before = preview.scheduler.request_steps          # the passes the step scheduler ran for it
    four = preview.infill(request, DecodeSettings(n=4, temperature=temperature, greedy_first=True))
    assert preview.scheduler.request_steps - before == four.steps
    assert four.steps <= alone.steps + EXTRA_PASSES
    assert four.candidates[0] == alone.candidates[0]
    assert four.slot_widths == alone.slot_widths
    assert len(four.candidates) == 4

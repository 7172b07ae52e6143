"""Commit confidences: the loop records the confidence each token was committed with, the engine
hands each candidate's per slot with where each token ends in the slot's text
(InfillResult.confidences), which the completion pipeline's confidence gate reads
(tests/postprocess/test_confidence_gate.py). And alternatives: with `greedy_first`, candidate 0 is
the greedy completion whatever the other candidates sample."""
from __future__ import annotations

import pytest

from dllm_lsp.engine.denoise import denoise
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, Slot
from dllm_lsp.loader import load_model

from .test_denoise_loop import PAD, VOCAB, A, B, C, ScriptedDenoiser, canvas_of


def renormalised(p: float) -> float:
    """ScriptedDenoiser's top probability once the mask id is taken out of the choice."""
    return p / (1 - (1 - p) / (VOCAB - 1))


def test_each_position_keeps_the_confidence_it_was_committed_with():
    # Step 1 commits A (confident) and, by the step floor, B (unsure); step 2 commits C by the
    # floor and then the end that followed it at its frontier.
    conf = [0.95, 0.3, 0.35, 0.99]
    outcome = denoise(ScriptedDenoiser([A, B, C, PAD], conf), canvas_of(4), DecodeSettings(steps=2, threshold=0.9))
    assert outcome.span_ids[0].tolist() == [A, B, C, PAD]
    assert outcome.confidence[0].tolist() == pytest.approx([renormalised(p) for p in conf], abs=1e-5)


def test_margin_confidences_are_recorded_on_their_own_scale():
    conf = [0.95, 0.3, 0.35, 0.99]
    outcome = denoise(ScriptedDenoiser([A, B, C, PAD], conf), canvas_of(4),
                      DecodeSettings(steps=2, threshold=0.9, confidence="margin"))
    prob = outcome.confidence[0].tolist()
    expected = [renormalised(p) - (1 - renormalised(p)) / (VOCAB - 2) for p in conf]   # top-1 minus the even rest
    assert prob == pytest.approx(expected, abs=1e-5)


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> Engine:
    return Engine(load_model(tiny_model_dir, "cpu"))


def check_slots(result) -> None:
    """Every candidate's slots' tokens end inside their text, in order, the last at its end (the
    test tokenizer is byte-level over ASCII text), with a probability each."""
    assert result.confidences is not None and len(result.confidences) == len(result.candidates)
    for texts, slots in zip(result.candidates, result.confidences):
        assert len(slots) == len(texts)
        for text, tokens in zip(texts, slots):
            ends = [t.end for t in tokens]
            assert ends == sorted(ends)
            if text.isascii():
                assert (ends[-1] if ends else 0) == len(text)
            assert all(0.0 < t.confidence <= 1.0 for t in tokens)


def test_the_engine_reports_each_slots_tokens_with_their_confidences(engine):
    request = InfillRequest(pieces=["def f(a, b):\n    x = ", "\n    y = ", "\n    return x + y\n"],
                            slots=[Slot(10), Slot(6)])
    result = engine.infill(request, DecodeSettings(steps=4, threshold=0.9))
    check_slots(result)
    assert sum(map(len, result.confidences[0])) == result.tokens_committed


def test_growing_slots_keep_their_tokens_confidences(engine):
    # A slot that starts 2 wide and grows: the positions it grew into are recorded too.
    result = engine.infill(InfillRequest.single("total = 0\nfor i in range(10):\n    total += ", "\n", 16),
                           DecodeSettings(steps=3, threshold=0.9, slot_start_tokens=2))
    check_slots(result)


@pytest.mark.parametrize("slot_start", [0, 2])
def test_alternatives_are_sampled_beside_the_greedy_completion(engine, slot_start):
    request = InfillRequest.single("def area(width, height):\n    return ", "\n\n\nprint(area(2, 3))\n", 12)
    greedy = engine.infill(request, DecodeSettings(steps=4, slot_start_tokens=slot_start))
    several = engine.infill(request, DecodeSettings(steps=4, slot_start_tokens=slot_start, n=4, temperature=1.0,
                                                    greedy_first=True))
    assert several.candidates[0] == greedy.candidates[0]          # the first stays the greedy one
    assert any(c != greedy.candidates[0] for c in several.candidates[1:])
    check_slots(several)
    sampled = engine.infill(request, DecodeSettings(steps=4, slot_start_tokens=slot_start, n=4, temperature=1.0))
    assert sampled.candidates != several.candidates                # without greedy_first every candidate samples

"""A request's model forward passes are bounded (engine.MAX_REQUEST_PASSES): growing slots get a
fresh step budget at each doubling, so many narrow-starting slots at a large step budget were
allowed tens of thousands of passes; the variable-length loop runs its candidates one after
another. The real tiny model, in-process."""
from __future__ import annotations

import pytest

from dllm_lsp.engine import engine as engine_module
from dllm_lsp.engine.engine import MAX_REQUEST_PASSES, Engine, growing_passes, variable_length_passes
from dllm_lsp.engine.types import GROWING_SLOT_START, DecodeSettings, InfillRequest, Slot
from dllm_lsp.engine.variable_length import VariableLengthRun
from dllm_lsp.loader import load_model

PREFIX = "def area(width, height):\n    return "


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> Engine:
    return Engine(load_model(tiny_model_dir, "cpu"), batching=False)


def many_slots(count: int, width: int) -> InfillRequest:
    return InfillRequest([PREFIX, *(["\n    x = "] * (count - 1)), "\n"], [Slot(width) for _ in range(count)])


def test_a_default_completion_keeps_its_growing_slot():
    one = InfillRequest.single(PREFIX, "\n", 64)
    assert growing_passes(one, GROWING_SLOT_START, 16) == 51 <= MAX_REQUEST_PASSES


def test_many_narrow_growing_slots_at_a_large_step_budget_stay_within_the_cap(engine):
    request = many_slots(12, 32)
    # every step commits only what the budget forces (threshold 1.0): a window takes its steps
    settings = DecodeSettings(steps=48, threshold=1.0, slot_start_tokens=1)
    assert growing_passes(request, 1, settings.steps) > MAX_REQUEST_PASSES
    result = engine.infill(request, settings)
    assert result.steps <= MAX_REQUEST_PASSES, result.steps
    assert engine.start_tokens(settings, request) is None       # full width: one window
    assert engine.start_tokens(settings, many_slots(1, 8)) == 1    # a narrower request still grows


def test_variable_length_alternatives_beyond_the_cap_are_dropped(engine, monkeypatch):
    """The tiny model run by the variable-length loop (its candidates one after another)."""
    seen = []
    real = VariableLengthRun.__init__

    def recording(self, denoiser, canvas, settings, *args, **kwargs):
        seen.append(settings.n)
        real(self, denoiser, canvas, settings, *args, **kwargs)

    monkeypatch.setattr(VariableLengthRun, "__init__", recording)
    monkeypatch.setitem(engine_module.RUNS, engine.denoiser.decoding, VariableLengthRun)
    request = InfillRequest.single(PREFIX, "\n", 8)
    # candidate 0 takes up to 129 calls and the alternatives as many again: over the cap
    assert variable_length_passes(128, 2) > MAX_REQUEST_PASSES >= variable_length_passes(96, 8)
    result = engine.infill(request, DecodeSettings(steps=128, n=8, temperature=0.5))
    assert seen == [1] and len(result.candidates) == 1
    result = engine.infill(request, DecodeSettings(steps=96, n=8, temperature=0.5, threshold=1.0))
    assert seen == [1, 8] and len(result.candidates) == 8 and result.steps <= MAX_REQUEST_PASSES, result.steps

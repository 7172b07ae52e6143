"""Commit confidences from the open checkpoints' loops: the masked-diffusion families and the
block-wise loop record them (InfillResult.confidences, what the confidence gate reads);
DreamOn's variable-length loop records none, and its completions are never gated."""
from __future__ import annotations

import pytest

from dllm_lsp.checkpoints.block_tiny import write_tiny_block_checkpoint
from dllm_lsp.checkpoints.tiny import LAYOUTS
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, Slot
from dllm_lsp.loader import load_model

REQUEST = InfillRequest.single("def area(width, height):\n    return ", "\n\n\nprint(area(2, 3))\n", 8)


def assert_recorded(result) -> None:
    assert len(result.confidences) == len(result.candidates)
    (slot,) = result.confidences[0]
    assert len(slot) == result.tokens_committed
    assert [t.end for t in slot] == sorted(t.end for t in slot)
    assert all(0.0 < t.confidence <= 1.0 for t in slot)


@pytest.mark.parametrize("layout", [layout for layout in LAYOUTS if layout != "dreamon"])
def test_masked_diffusion_checkpoints_record_confidences(loaded, layout):
    assert_recorded(Engine(loaded[layout]).infill(REQUEST, DecodeSettings(steps=4)))


def test_dreamon_records_none(loaded):
    assert Engine(loaded["dreamon"]).infill(REQUEST, DecodeSettings(steps=4)).confidences is None


@pytest.mark.parametrize("layout", ["sdar", "fast-dllm-v2"])
def test_block_diffusion_records_confidences(tmp_path, layout):
    model = load_model(str(write_tiny_block_checkpoint(tmp_path / layout, layout, seed=3)), "cpu")
    for settings in (DecodeSettings(steps=4), DecodeSettings(steps=2, n=2, temperature=0.7)):
        result = Engine(model).infill(REQUEST, settings)
        assert_recorded(result)


@pytest.mark.parametrize("layout", ["dream", "dreamon", "sdar"])
def test_the_first_candidate_stays_greedy_beside_sampled_alternatives(loaded, tmp_path, layout):
    model = loaded[layout] if layout in loaded else load_model(
        str(write_tiny_block_checkpoint(tmp_path / layout, layout, seed=3)), "cpu")
    # Two slots: a block model decodes the second one candidate by candidate (their prefixes differ).
    two = InfillRequest(pieces=["def f(a, b):\n    x = ", "\n    y = ", "\n    return x + y\n"],
                        slots=[Slot(6), Slot(6)])
    for request in (REQUEST, two):
        greedy = Engine(model).infill(request, DecodeSettings(steps=4))
        several = Engine(model).infill(request, DecodeSettings(steps=4, n=3, temperature=1.0, greedy_first=True))
        assert several.candidates[0] == greedy.candidates[0] and len(several.candidates) == 3

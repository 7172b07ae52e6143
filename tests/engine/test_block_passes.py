"""The block-wise loop's forward passes are bounded by engine.MAX_REQUEST_PASSES too: it spends a
step budget per block, so a wide span or many slots at a large step budget ran hundreds of passes.
A tiny random SDAR checkpoint (blocks of 4) run in-process: its random weights never end a span,
so every block is decoded and the worst case is what runs."""
from __future__ import annotations

import pytest

from dllm_lsp.checkpoints.block_tiny import write_tiny_block_checkpoint
from dllm_lsp.engine.engine import MAX_REQUEST_PASSES, Engine, block_passes, capped_blocks
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, Slot
from dllm_lsp.loader import load_model

PREFIX = "def area(width, height):\n    return "
# Every step commits only what its budget forces: a block of 4 at 16 steps takes 4 passes.
SLOW = DecodeSettings(steps=16, threshold=1.0)


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> Engine:
    folder = write_tiny_block_checkpoint(tmp_path_factory.mktemp("block") / "sdar", "sdar")
    return Engine(load_model(str(folder), "cpu"), batching=False)


def many_slots(count: int, width: int) -> InfillRequest:
    return InfillRequest([PREFIX, *(["\n    y = "] * (count - 1)), "\n"], [Slot(width) for _ in range(count)])


def test_a_default_block_completion_keeps_its_steps():
    one = InfillRequest.single(PREFIX, "\n", 64)
    assert block_passes(one, 16, 4) <= MAX_REQUEST_PASSES
    assert capped_blocks(one, DecodeSettings(), 4) == (one, DecodeSettings())


@pytest.mark.parametrize("request_", [InfillRequest.single(PREFIX, "\n", 512), many_slots(12, 32)],
                         ids=["one wide slot", "twelve slots"])
def test_block_passes_stay_within_the_cap(engine, request_):
    assert engine.denoiser.block_size == 4
    result = engine.infill(request_, SLOW)
    assert result.steps <= MAX_REQUEST_PASSES, result.steps
    assert len(result.candidates[0]) == len(request_.slots)
    assert all(text for text in result.candidates[0])            # every slot still answered


def test_only_the_steps_per_block_go_while_they_are_enough(engine):
    settings, request = SLOW, many_slots(12, 32)
    capped_request, capped = capped_blocks(request, settings, 4)
    assert capped_request == request and capped.n == settings.n and 1 <= capped.steps < settings.steps
    result = engine.infill(request, settings)
    assert result.slot_widths == (32,) * 12                     # nothing narrowed


def test_alternatives_stay_as_they_cost_no_pass(engine):
    """Candidate 0 paces the batch and the slots before the last are decoded once (blockwise.py),
    so the cap takes steps and width, never the alternatives; the run keeps within it with them."""
    request = many_slots(6, 64)
    settings = DecodeSettings(steps=16, n=4, temperature=0.5, threshold=1.0)
    capped_request, capped = capped_blocks(request, settings, 4)
    assert capped.n == 4 and block_passes(capped_request, capped.steps, 4) <= MAX_REQUEST_PASSES
    result = engine.infill(request, settings)
    assert result.steps <= MAX_REQUEST_PASSES and len(result.candidates) == 4, result.steps


def test_a_span_too_wide_for_one_step_a_block_is_narrowed(engine):
    request = InfillRequest.single(PREFIX, "\n", 512)
    narrowed, capped = capped_blocks(request, SLOW, 4)
    assert capped.steps == 1 and 256 < narrowed.slots[0].max_tokens < 512
    result = engine.infill(request, SLOW)
    assert result.slot_widths[0] <= narrowed.slots[0].max_tokens and result.text

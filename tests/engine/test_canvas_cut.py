"""The canvas cuts each text piece by characters before it tokenizes it: a request with megabytes
of prefix (`dllm-lsp infill`, an API caller) tokenized the whole of it, seconds holding the GIL,
to keep the budget's last tokens. The canvas is the one the already-cut text gives, and its
context tokens are those a whole tokenization ends with."""
from __future__ import annotations

import pytest

from dllm_lsp.engine.canvas import CUT_CHARS_PER_TOKEN, PREFIX_QUANTUM_CHARS, build_canvas, cut_pieces, cut_text_start
from dllm_lsp.engine.types import InfillRequest, Slot
from dllm_lsp.loader import load_model

UNIT = "def f{n}(values, scale={n}):\n    return [v * scale for v in values if v is not None]\n\n\n"
HUGE = "".join(UNIT.format(n=n) for n in range(40_000))           # ~3.3 M characters
BUDGET = 256


@pytest.fixture(scope="module")
def denoiser(tiny_model_dir):
    return load_model(tiny_model_dir, "cpu")


def recording(denoiser, seen: list[int]):
    def encode(text: str, role: str) -> list[int]:
        seen.append(len(text))
        return denoiser.encode(text)
    return encode


def test_a_multi_megabyte_prefix_is_cut_before_it_is_tokenized(denoiser):
    assert len(HUGE) > 3_000_000
    request = InfillRequest([HUGE, "\n" + HUGE, HUGE], [Slot(8), Slot(8)])
    seen: list[int] = []
    canvas = build_canvas(denoiser, request, BUDGET, recording(denoiser, seen))
    assert max(seen) < BUDGET * CUT_CHARS_PER_TOKEN + PREFIX_QUANTUM_CHARS, seen
    # the result equals the result on the already-cut pieces
    limit = BUDGET * CUT_CHARS_PER_TOKEN
    cut = InfillRequest([cut_text_start(HUGE, limit), cut_text_start("\n" + HUGE, limit), HUGE[:limit]],
                        request.slots)
    assert cut_pieces(cut.pieces, BUDGET) == cut.pieces   # cutting twice changes nothing
    again = build_canvas(denoiser, cut, BUDGET)
    assert canvas.ids.tolist() == again.ids.tolist() and canvas.slot_ranges == again.slot_ranges
    # and the context next to the slot is what tokenizing the whole text gives
    canvas = build_canvas(denoiser, InfillRequest.single(HUGE, HUGE, 8), BUDGET)
    (start, end), = canvas.slot_ranges
    bos = 1 if denoiser.special.bos_id is not None else 0
    kept_prefix, kept_suffix = canvas.ids[bos:start].tolist(), canvas.ids[end:].tolist()
    assert len(kept_prefix) > BUDGET // 2 and kept_suffix
    assert denoiser.encode(HUGE[-200_000:])[-len(kept_prefix):] == kept_prefix
    assert denoiser.encode(HUGE[:200_000])[:len(kept_suffix)] == kept_suffix


def test_a_short_request_is_not_cut(denoiser):
    request = InfillRequest.single("def area(w, h):\n    return ", "\n\nprint(area(2, 3))\n", 8)
    assert cut_pieces(request.pieces, BUDGET) == request.pieces


def test_the_prefix_cut_stays_put_while_text_is_typed_at_its_end():
    limit = 1000
    starts = {len(HUGE[:200_000] + "x" * typed) - len(cut_text_start(HUGE[:200_000] + "x" * typed, limit))
              for typed in range(0, 200)}
    assert len(starts) <= 2

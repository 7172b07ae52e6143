"""The engine on tiny randomly initialised models: shapes, determinism, caching, cancellation,
variable length and several slots."""
from __future__ import annotations

import pytest
import torch

from dllm_lsp.arch.embedded_denoiser import EmbeddedDenoiser
from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.engine.canvas import build_canvas
from dllm_lsp.engine.denoise import Cancelled
from dllm_lsp.engine.engine import CancelToken, Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, Slot
from dllm_lsp.loader import load_model

PREFIX = "def area(width, height):\n    return "
SUFFIX = "\n\n\nprint(area(2, 3))\n"


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> Engine:
    return Engine(load_model(tiny_model_dir, "cpu"))


def full_forward_span_logits(denoiser: EmbeddedDenoiser, canvas) -> torch.Tensor:
    ids = canvas.ids[None]
    is_span = ~canvas.context_mask()[None]
    return denoiser.model(ids, is_span)[:, canvas.span_positions()]


def test_canvas_layout_places_masks_between_context(engine):
    canvas = engine.canvas(InfillRequest.single(PREFIX, SUFFIX, 12))
    (start, end), = canvas.slot_ranges
    mask_id = engine.denoiser.special.mask_id
    assert end - start == 12
    assert (canvas.ids[start:end] == mask_id).all()
    assert engine.denoiser.decode(canvas.ids[:start].tolist()) == PREFIX
    assert engine.denoiser.decode(canvas.ids[end:].tolist()) == SUFFIX


def test_a_crlf_or_lone_cr_context_is_read_as_lf(engine):
    """The models read LF line ends (the embedded one never saw a CR): a CRLF or classic-Mac
    file's context is what the same file with LF would give, completions included."""
    lf = InfillRequest.single("import os\n\n" + PREFIX, SUFFIX, 8, single_line=True)
    settings = DecodeSettings(steps=4)
    want = engine.infill(lf, settings).candidates
    for newline in ("\r\n", "\r"):
        other = InfillRequest.single(lf.prefix.replace("\n", newline), SUFFIX.replace("\n", newline), 8, single_line=True)
        assert other.with_lf_line_ends() == lf
        assert engine.infill(other, settings).candidates == want


def test_canvas_keeps_more_prefix_than_suffix_when_cut(engine):
    long_prefix = "x = 1\n" * 400
    long_suffix = "y = 2\n" * 400
    canvas = build_canvas(engine.denoiser, InfillRequest.single(long_prefix, long_suffix, 8), context_budget=100)
    (start, end), = canvas.slot_ranges
    prefix_tokens, suffix_tokens = start, canvas.length - end
    assert prefix_tokens + suffix_tokens <= 100
    assert prefix_tokens > suffix_tokens > 0
    assert engine.denoiser.decode(canvas.ids[:start].tolist()).endswith("x = 1\n")


def test_text_between_slots_never_pushes_the_canvas_past_the_models_positions(engine):
    # A middle of ~1,500 tokens (a companion slot far above the cursor, say) in a tiny model's
    # positions: the canvas fits, and each middle keeps the end that leads into the next slot.
    denoiser = engine.denoiser
    middle = "".join(f"value_{i} = compute({i})\n" for i in range(300))
    request = InfillRequest(["import os\n", middle, "x = ", "\n"], [Slot(8), Slot(8), Slot(8)])
    canvas = build_canvas(denoiser, request, context_budget=10_000)
    assert canvas.length <= denoiser.max_context
    (_, end1), (start2, _), _ = canvas.slot_ranges
    kept = denoiser.decode(canvas.ids[end1:start2].tolist())
    assert 0 < len(kept) < len(middle) and middle.endswith(kept)


def test_the_cut_prefix_starts_at_the_same_token_while_the_user_types(engine):
    # The prefix is cut in steps of tokens, so typing at its end keeps its first kept token
    # (and the model's cached context) for a while instead of shifting it every keystroke.
    denoiser = engine.denoiser
    base = "".join(f"item_{i} = {i}\n" for i in range(400))
    starts = []
    for typed in ["r", "re", "ret", "retu", "retur", "return", "return 1", "return 12"]:
        canvas = build_canvas(denoiser, InfillRequest.single(base + typed, "\n", 8), context_budget=100)
        starts.append(canvas.ids[: canvas.slot_ranges[0][0]].tolist()[:4])
    assert starts.count(starts[0]) >= len(starts) - 1, starts


def test_cached_span_logits_equal_the_full_forward(engine):
    denoiser = engine.denoiser
    canvas = engine.canvas(InfillRequest(["a = ", "\nb = ", "\n"], [Slot(5), Slot(7)]))
    session = denoiser.session(canvas, 1)
    cached = session.logits(canvas.ids[None])
    assert cached.shape == (1, 12, denoiser.tokenizer.get_vocab_size())
    torch.testing.assert_close(cached, full_forward_span_logits(denoiser, canvas), atol=1e-5, rtol=1e-5)


def test_prefix_cache_is_reused_across_keystrokes_and_stays_exact(tiny_model_dir):
    warm = load_model(tiny_model_dir, "cpu")
    cold = load_model(tiny_model_dir, "cpu")
    first = build_canvas(warm, InfillRequest.single(PREFIX, SUFFIX, 8), 512)
    opened = warm.session(first, 1)
    # Opening a session only looks its context up: the caches learn it from its first step.
    assert warm.session(first, 1) and warm.last_reused_tokens == 0
    opened.logits(first.ids[None])
    typed = build_canvas(warm, InfillRequest.single(PREFIX + "width * ", SUFFIX, 8), 512)
    warm_logits = warm.session(typed, 1).logits(typed.ids[None])
    assert warm.last_reused_tokens > 0
    cold_logits = cold.session(typed, 1).logits(typed.ids[None])
    assert cold.last_reused_tokens == 0
    torch.testing.assert_close(warm_logits, cold_logits, atol=1e-5, rtol=1e-5)


def test_greedy_infill_is_deterministic(engine):
    request = InfillRequest.single(PREFIX, SUFFIX, 16)
    first = engine.infill(request, DecodeSettings(steps=4, threshold=1.0))
    second = engine.infill(request, DecodeSettings(steps=4, threshold=1.0))
    assert first.candidates == second.candidates
    assert first.text and first.steps == 4
    assert first.tokens_committed == 16   # the random model never chooses pad (zeroed row)


def test_step_budget_bounds_forward_passes(engine):
    request = InfillRequest.single(PREFIX, SUFFIX, 16)
    assert engine.infill(request, DecodeSettings(steps=4, threshold=1.0)).steps == 4
    # Threshold 0 commits everything at once: early exit after one step.
    assert engine.infill(request, DecodeSettings(steps=8, threshold=0.0)).steps == 1


def test_n_candidates_decode_in_one_batch(engine):
    request = InfillRequest.single(PREFIX, SUFFIX, 10)
    result = engine.infill(request, DecodeSettings(steps=3, n=3, temperature=1.5, seed=7))
    assert len(result.candidates) == 3 and all(len(c) == 1 for c in result.candidates)
    assert len({c[0] for c in result.candidates}) > 1, "sampled candidates should differ"
    again = engine.infill(request, DecodeSettings(steps=3, n=3, temperature=1.5, seed=7))
    assert again.candidates == result.candidates


def test_several_slots_fill_jointly(engine):
    request = InfillRequest(["import ", "\n\ndef f():\n    return ", "\n"], [Slot(4), Slot(6)])
    result = engine.infill(request, DecodeSettings(steps=3))
    assert len(result.candidates[0]) == 2
    assert all(text for text in result.candidates[0])


def test_cancel_stops_at_a_step_boundary(engine):
    token = CancelToken()
    steps_seen = []

    def on_step(state):
        steps_seen.append(state.step)
        if state.step == 2:
            token.cancel()

    with pytest.raises(Cancelled):
        engine.infill(InfillRequest.single(PREFIX, SUFFIX, 32), DecodeSettings(steps=16, threshold=1.0), token, on_step)
    assert steps_seen == [1, 2]


def test_streamed_states_leave_masks_out_and_sharpen(engine):
    states = []
    engine.infill(InfillRequest.single(PREFIX, SUFFIX, 12), DecodeSettings(steps=4, threshold=1.0), on_step=states.append)
    assert [s.step for s in states] == [1, 2, 3, 4]
    assert [s.masked_left for s in states] == [9, 6, 3, 0]
    lengths = [len(s.slot_texts[0][0]) for s in states]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]


def test_bidirectional_layout_runs_uncached(tmp_path):
    folder = write_tiny_model(tmp_path / "bi", layout="bidirectional")
    engine = Engine(load_model(folder, "cpu"))
    result = engine.infill(InfillRequest.single(PREFIX, SUFFIX, 8), DecodeSettings(steps=2, threshold=1.0))
    assert result.text and result.steps == 2


def test_slots_that_leave_no_room_are_refused(engine):
    with pytest.raises(ValueError, match="no room"):
        engine.infill(InfillRequest.single("x", "y", engine.denoiser.max_context))


def test_empty_document_still_completes(engine):
    result = engine.infill(InfillRequest.single("", "", 6), DecodeSettings(steps=2))
    assert isinstance(result.text, str) and result.steps >= 1

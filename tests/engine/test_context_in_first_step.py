"""The embedded model computes a request's uncached context in its first step's pass, with
the span rows: no prefill pass of its own, exact against the whole-canvas forward, shared with
other requests' steps, and cached for the next keystroke only once it exists."""
from __future__ import annotations

import pytest
import torch

from dllm_lsp.arch.embedded import EmbeddedModel, SpanRows
from dllm_lsp.engine.denoise import FixedLengthRun, StepRows
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model

from .together import infill_together

PREFIX = "def area(width, height):\n    total = width * height\n    return "
SUFFIX = "\n\nprint(area(2, 3))\n"


@pytest.fixture
def denoiser(tiny_model_dir):
    return load_model(tiny_model_dir, "cpu")


def full_forward(model: EmbeddedModel, ids: torch.Tensor, span_pos: torch.Tensor) -> torch.Tensor:
    """Logits at the span positions from the whole canvas at once (no cache): the ground truth."""
    is_span = torch.zeros_like(ids, dtype=torch.bool)
    is_span[:, span_pos] = True
    with torch.no_grad():
        return model(ids, is_span)[:, span_pos]


def test_a_step_with_new_cached_and_partly_cached_contexts_equals_the_whole_canvas(denoiser):
    model = denoiser.model
    engine = Engine(denoiser, batching=False)
    canvases = [engine.canvas(InfillRequest.single(PREFIX, SUFFIX, 6)),
                engine.canvas(InfillRequest.single("import os\n" * 12 + "path = os.path.join(", ")\n", 5)),
                engine.canvas(InfillRequest.single("class Stack:\n    def push(self, x):\n        ", "\n", 7))]
    parts, truths = [], []
    g = torch.Generator().manual_seed(3)
    for index, (canvas, batch) in enumerate(zip(canvases, (1, 3, 2))):
        ids = canvas.ids[None].repeat(batch, 1)
        span_pos = canvas.span_positions()
        ids[:, span_pos[:2]] = torch.randint(5, 200, (batch, 2), generator=g)   # some tokens committed
        ctx = canvas.context_mask()
        ctx_ids, ctx_pos = canvas.ids[ctx], torch.arange(canvas.length)[ctx]
        cached = (0, 7, len(ctx_ids))[index]      # nothing, a prefix, or all of the context cached
        past = denoiser._empty_kv()
        if cached:
            empty_span = SpanRows(ids[:1, span_pos[:1]], span_pos[:1], past, ctx_ids[:cached], ctx_pos[:cached])
            (_, kv), = model.step([empty_span])
            past = [(k[:, :, :cached], v[:, :, :cached]) for k, v in kv]
        rows = torch.rand(batch, len(span_pos), generator=g) < 0.6 if index == 1 else None
        parts.append(SpanRows(ids[:, span_pos], span_pos, past, ctx_ids[cached:] if cached < len(ctx_ids) else None,
                              ctx_pos[cached:] if cached < len(ctx_ids) else None, rows))
        truth = full_forward(model, ids, span_pos)
        truths.append(truth if rows is None else truth[rows])
    out = model.step(parts)
    for part, truth, (logits, context) in zip(parts, truths, out):
        torch.testing.assert_close(logits, truth, atol=2e-4, rtol=1e-4)
        assert all(k.shape[2] == part.context[0][0].shape[2] + part.n_new for k, _ in context)
    # The context a step computed serves the next step exactly.
    logits, _ = model.step([SpanRows(parts[0].span, parts[0].positions, out[0][1])])[0]
    torch.testing.assert_close(logits, truths[0], atol=2e-4, rtol=1e-4)


def test_a_run_carries_its_context_rows_in_its_first_step_only(denoiser):
    engine = Engine(denoiser, batching=False)
    canvas = engine.canvas(InfillRequest.single(PREFIX, SUFFIX, 8))
    context = int(canvas.context_mask().sum())
    settings = DecodeSettings(steps=4)
    planned = FixedLengthRun.planned_rows(denoiser, canvas, settings)
    run = FixedLengthRun(denoiser, canvas, settings)
    assert planned == run.step_rows == StepRows(8, context)
    run.advance(run.session.logits(run.ids, run.rows()))
    assert run.step_rows == StepRows(8)
    # The context is cached now: the same canvas again computes none of it.
    assert FixedLengthRun.planned_rows(denoiser, canvas, settings) == StepRows(8)
    stats = denoiser.context_stats()
    assert stats["tokens"] == context and stats["seconds"] > 0


def test_a_session_never_stepped_leaves_no_cache_and_a_stepped_one_serves_the_next_keystroke(denoiser):
    engine = Engine(denoiser, batching=False)
    first = engine.canvas(InfillRequest.single(PREFIX, SUFFIX, 6))
    denoiser.session(first, 1)                      # opened, cancelled before its first step
    typed = engine.canvas(InfillRequest.single(PREFIX + "w", SUFFIX, 6))
    assert denoiser.uncached_context_rows(typed) == int(typed.context_mask().sum())
    session = denoiser.session(first, 1)
    session.logits(first.ids[None])
    assert denoiser.uncached_context_rows(typed) < int(typed.context_mask().sum()) - 10


def test_every_model_pass_is_a_step_when_requests_arrive_together(denoiser):
    """Fresh requests' contexts ride in their first shared step: the model runs exactly the
    passes the scheduler counts, none for context alone."""
    passes = []   # every pass through the model (a prefill, a step) starts at the embedding
    hook = denoiser.model.embed.register_forward_hook(lambda *_: passes.append(1))
    requests = [InfillRequest.single(PREFIX, SUFFIX, 6),
                InfillRequest.single("import os\n" * 12 + "path = os.path.join(", ")\n", 5),
                InfillRequest.single("class Stack:\n    def push(self, x):\n        ", "\n", 7)]
    settings = DecodeSettings(steps=6, threshold=1.0)
    want = [Engine(denoiser, batching=False).infill(r, settings).candidates for r in requests]
    passes.clear()
    engine = Engine(denoiser)
    for _ in range(4):       # a GPU-like step cost (fixed, not per row): every request joins every step
        engine.scheduler.cost.observe(StepRows(1), 0.01)
        engine.scheduler.cost.observe(StepRows(1000, 1000), 0.0101)
    assert infill_together(engine, requests, settings) == want
    stats = engine.scheduler.stats()
    hook.remove()
    assert len(passes) == stats["forwardPasses"], (len(passes), stats)
    assert stats["largestBatch"] == 3 and stats["forwardPasses"] < stats["requestSteps"]


def test_the_context_in_a_pass_of_its_own_gives_the_same_completions(denoiser, tiny_model_dir):
    """`serve --context-pass own` (the baseline): the same completions, one pass more per request."""
    requests = [InfillRequest.single(PREFIX, SUFFIX, 6),
                InfillRequest.single("import os\n" * 12 + "path = os.path.join(", ")\n", 5)]
    settings = DecodeSettings(steps=4, threshold=1.0)
    own = load_model(tiny_model_dir, "cpu")
    own.context_in_first_step = False
    passes = {"first-step": [], "own": []}
    denoiser.model.embed.register_forward_hook(lambda *_: passes["first-step"].append(1))
    own.model.embed.register_forward_hook(lambda *_: passes["own"].append(1))
    merged = [Engine(denoiser, batching=False).infill(r, settings).candidates for r in requests]
    assert [Engine(own, batching=False).infill(r, settings).candidates for r in requests] == merged
    assert len(passes["own"]) == len(passes["first-step"]) + len(requests)
    # A slot that grows opens a new session: the context after it moved, and its keys/values
    # come from the next step's pass (or, as a baseline, a pass of their own).
    growing = DecodeSettings(steps=4, threshold=1.0, slot_start_tokens=4)
    grown = InfillRequest.single("def f(x):\n    return ", "\n\nprint(f(2))\n", 16)
    first = Engine(denoiser, batching=False).infill(grown, growing)
    alone = Engine(own, batching=False).infill(grown, growing)
    assert first.steps > 4 and (alone.candidates, alone.steps) == (first.candidates, first.steps)
    assert own.context_stats()["seconds"] > 0 and own.context_stats()["tokens"] == denoiser.context_stats()["tokens"]

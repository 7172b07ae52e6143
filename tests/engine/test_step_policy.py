"""The step scheduler's policy: the step-cost model, how long requests stay wanted, which
requests share a step, and that a waiting request costs nothing until it joins one."""
from __future__ import annotations

import threading
import time

import pytest

from dllm_lsp.engine.batching import Job, StepCost, StepScheduler
from dllm_lsp.engine.denoise import Cancelled, FixedLengthRun, StepRows
from dllm_lsp.engine.engine import CancelToken, Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model

SLOW = DecodeSettings(steps=16, threshold=1.0)
REQUEST = InfillRequest.single("def area(width, height):\n    return ", "\n\nprint(area(2, 3))\n", 12)


@pytest.fixture(scope="module")
def denoiser(tiny_model_dir):
    return load_model(tiny_model_dir, "cpu")


class FrozenCost(StepCost):
    """A step-cost model that has learnt `fixed` + `per_row` seconds and learns no more (the
    real one learns from wall time, which a test on a shared machine cannot pin down)."""

    def __init__(self, fixed: float, per_row: float, per_context: float | None = None) -> None:
        super().__init__()
        per_context = per_row if per_context is None else per_context
        for span, context in ((8, 0), (16, 40), (32, 0), (64, 100), (128, 0), (256, 20)):
            super().observe(StepRows(span, context), fixed + per_row * span + per_context * context)
        learnt = self.fit()
        assert (learnt.fixed, learnt.per_row, learnt.per_context_row) == pytest.approx((fixed, per_row, per_context))

    def observe(self, rows: StepRows, seconds: float) -> None:
        pass


def _coefficients(cost: StepCost) -> tuple[float, float, float]:
    fit = cost.fit()
    return fit.fixed, fit.per_row, fit.per_context_row


def test_step_cost_recovers_fixed_and_per_row_parts():
    cost = StepCost()
    assert cost.fit() is None and cost.predict(StepRows(32)) is None
    for rows in (32, 64, 32, 96, 128, 32):
        cost.observe(StepRows(rows), 0.004 + 0.0002 * rows)
    fixed, per_row, per_context = _coefficients(cost)
    assert fixed == pytest.approx(0.004, rel=1e-6) and per_row == pytest.approx(0.0002, rel=1e-6)
    assert per_context == per_row                      # no context rows seen yet: taken as a span row's
    assert cost.predict(StepRows(100)) == pytest.approx(0.024, rel=1e-6)


def test_context_rows_get_their_own_cost():
    """A first step carries its request's context rows, which cost less than span rows (kept for
    their keys and values only). Counted as span rows they bent the fit: steps with many
    cheap rows made the per-row cost look small and the fixed part large, which is what makes
    the scheduler share steps where sharing does not pay (a CPU)."""
    def seconds(span, context):
        return 0.002 + 0.0003 * span + 0.0001 * context
    # Typing: mostly later steps (span rows only), now and then a first step with context rows.
    steps = [(16, 0), (16, 0), (32, 0), (16, 180), (16, 0), (48, 0), (16, 0), (32, 90), (16, 0), (64, 0),
             (16, 40), (16, 0)]
    cost = StepCost()
    for span, context in steps:
        cost.observe(StepRows(span, context), seconds(span, context))
    assert _coefficients(cost) == pytest.approx((0.002, 0.0003, 0.0001), rel=1e-6)
    assert cost.predict(StepRows(32, 100)) == pytest.approx(seconds(32, 100), rel=1e-6)
    # What one count of rows made of the same steps: a fixed part several times the true one,
    # a per-row cost well under a span row's.
    merged = StepCost()
    for span, context in steps:
        merged.observe(StepRows(span + context), seconds(span, context))
    fixed, per_row, _ = _coefficients(merged)
    assert fixed > 2 * 0.002 and per_row < 0.5 * 0.0003


def test_a_coefficient_the_recent_steps_cannot_tell_keeps_its_last_value():
    cost = StepCost()
    for span, context in [(16, 0), (32, 0), (16, 100), (48, 0), (16, 50), (32, 0)]:
        cost.observe(StepRows(span, context), 0.001 + 0.0004 * span + 0.0001 * context)
    assert _coefficients(cost) == pytest.approx((0.001, 0.0004, 0.0001), rel=1e-6)
    for _ in range(300):          # warm caches for a long while: no context rows, span sizes vary
        for span in (16, 32):
            cost.observe(StepRows(span), 0.002 + 0.0005 * span)
    fixed, per_row, per_context = _coefficients(cost)
    assert (fixed, per_row) == pytest.approx((0.002, 0.0005), rel=1e-6)
    assert per_context == pytest.approx(0.0001, rel=1e-6)   # not reset, not taken as a span row's
    for _ in range(300):          # span rows turn cheap: the kept context cost may not exceed them
        for span in (16, 32):
            cost.observe(StepRows(span), 0.002 + 0.00005 * span)
    fixed, per_row, per_context = _coefficients(cost)
    assert per_row == pytest.approx(0.00005, rel=1e-6) and per_context == per_row


def test_a_context_row_is_never_fitted_dearer_than_a_span_row():
    """Noisy steps can make the joint fit say a context row costs more than a span row (or a
    span row nothing), which no model does: the fit then gives both kinds one slope."""
    steps = [(16, 0, 0.010), (16, 100, 0.016), (32, 100, 0.012), (32, 0, 0.009), (16, 50, 0.014), (48, 0, 0.011)]
    cost = StepCost(decay=1.0)
    for span, context, seconds in steps:
        cost.observe(StepRows(span, context), seconds)
    fixed, per_row, per_context = _coefficients(cost)
    assert per_row == per_context > 0
    merged = StepCost(decay=1.0)                       # the same as counting the rows as one
    for span, context, seconds in steps:
        merged.observe(StepRows(span + context), seconds)
    assert _coefficients(merged) == pytest.approx((fixed, per_row, per_context), rel=1e-9)


def test_step_cost_of_one_size_is_unknown_but_proportional_is_offered():
    cost = StepCost()
    for _ in range(10):
        cost.observe(StepRows(32), 0.008)
    assert cost.fit() is None                          # one size: fixed and per-row cannot be told apart
    offered = cost.proportional()
    assert (offered.fixed, offered.per_row, offered.per_context_row) == pytest.approx((0.0, 0.008 / 32, 0.008 / 32))


def test_a_long_spell_of_one_size_keeps_the_last_fit():
    cost = StepCost()
    for rows in (32, 64, 96, 32, 64):
        cost.observe(StepRows(rows), 0.001 + 0.0003 * rows)
    learnt = cost.fit()
    for _ in range(500):                               # one request at a time for a long while
        cost.observe(StepRows(32), 0.001 + 0.0003 * 32)
    assert cost.fit() == learnt                        # not "unknown" (which would batch everything)


def _job(rows: int, age: float) -> Job:
    job = Job(lambda: None, lambda: False, None, StepRows(rows))
    job.arrived = time.monotonic() - age
    return job


def test_order_is_first_come_first_served(denoiser):
    scheduler = StepScheduler(denoiser)
    long_old, short_new, middle = _job(64, 0.5), _job(4, 0.0), _job(8, 0.2)
    assert scheduler._order([short_new, middle, long_old]) == [long_old, middle, short_new]


def _submit(engine: Engine, request: InfillRequest, settings: DecodeSettings, on_step=None):
    canvas = engine.canvas(request)
    return engine.scheduler.submit(lambda: FixedLengthRun(engine.denoiser, canvas, settings, on_step),
                                   lambda: False, rows=StepRows(canvas.span_positions().numel()))


def _frozen(engine: Engine, fixed: float, per_row: float, per_context: float | None = None) -> Engine:
    engine.scheduler.cost = FrozenCost(fixed, per_row, per_context)
    engine.scheduler.explore_every = 0
    return engine


def test_where_cost_is_per_row_requests_take_steps_one_after_another(denoiser):
    engine = _frozen(Engine(denoiser, step_slack=1.25), 0.0, 0.001)   # a CPU: twice the rows, twice the time
    finished: list[str] = []
    started = threading.Event()
    # 24 undecided tokens, nothing ever confident: one commit a step.
    first = _submit(engine, InfillRequest.single("def f():\n    ", "\n", 24), DecodeSettings(steps=24, threshold=1.0),
                    on_step=lambda *_: started.set())
    first.add_done_callback(lambda f: finished.append("first"))
    assert started.wait(60)
    second = _submit(engine, InfillRequest.single("x = ", "\n", 24), DecodeSettings(steps=24, threshold=1.0))
    second.add_done_callback(lambda f: finished.append("second"))
    second.result(timeout=60)
    first.result(timeout=120)
    assert finished == ["first", "second"]             # first come, first served
    assert engine.scheduler.largest_batch == 1         # a second equal request would double the step
    # The same two where a step costs mostly its weights: they share steps.
    engine = _frozen(Engine(denoiser, step_slack=1.25), 0.05, 0.00001)
    started.clear()
    first = _submit(engine, InfillRequest.single("def f():\n    ", "\n", 24), DecodeSettings(steps=24, threshold=1.0),
                    on_step=lambda *_: started.set())
    assert started.wait(60)
    second = _submit(engine, InfillRequest.single("x = ", "\n", 24), DecodeSettings(steps=24, threshold=1.0))
    second.result(timeout=60)
    assert not first.done() or engine.scheduler.largest_batch == 2
    first.result(timeout=120)
    assert engine.scheduler.largest_batch == 2


def test_where_a_step_costs_mostly_its_weights_everything_shares_it(denoiser):
    engine = _frozen(Engine(denoiser, step_slack=1.25), 0.05, 0.00001)   # a GPU: 1 or 16 requests, about one cost
    futures = [_submit(engine, REQUEST, SLOW) for _ in range(4)]
    for f in futures:
        f.result(timeout=120)
    stats = engine.scheduler.stats()
    assert stats["largestBatch"] >= 3                  # (the first may start before the others arrive)
    assert stats["forwardPasses"] < stats["requestSteps"]


@pytest.mark.parametrize("context_row_cost", ["cheap", "as a span row"])
def test_a_new_requests_context_rows_are_priced_as_context_rows(tiny_model_dir, context_row_cost):
    """A request that arrives while another decodes carries its uncached context in its first
    step. Priced as span rows, those rows make its first step too dear to share (on a cost
    curve like a CPU's), so it waits out the other's whole denoise; priced as what they cost,
    it joins the next step."""
    denoiser = load_model(tiny_model_dir, "cpu")      # its own prefix caches: nothing cached
    per_context = 0.000001 if context_row_cost == "cheap" else 0.0001
    engine = _frozen(Engine(denoiser, step_slack=1.25), 0.01, 0.0001, per_context)
    started = threading.Event()
    slow = DecodeSettings(steps=24, threshold=1.0)
    first = _submit(engine, InfillRequest.single("def f():\n    ", "\n", 24), slow, on_step=lambda *_: started.set())
    assert started.wait(60)
    newcomer = InfillRequest.single("import os\nimport sys\n\nclass Reader:\n    def read(self, path):\n"
                                    "        with open(path) as handle:\n            return ", "\n", 24)
    canvas = engine.canvas(newcomer)
    planned = FixedLengthRun.planned_rows(denoiser, canvas, slow)
    assert planned.context >= 30                       # nothing of its context is cached yet
    first_done_at_its_first_step: list[bool] = []

    def on_step(step, *_):
        if step == 1:
            first_done_at_its_first_step.append(first.done())

    second = engine.scheduler.submit(lambda: FixedLengthRun(denoiser, canvas, slow, on_step), lambda: False,
                                     rows=planned)
    second.result(timeout=120)
    first.result(timeout=120)
    if context_row_cost == "cheap":                    # joined at once: its steps shared the first's
        assert first_done_at_its_first_step == [False] and engine.scheduler.largest_batch == 2
    else:                                              # its first step never fit the bound
        assert first_done_at_its_first_step == [True] and engine.scheduler.largest_batch == 1


def test_a_request_cancelled_while_waiting_never_costs_its_prefill(denoiser):
    engine = _frozen(Engine(denoiser, step_slack=1.25), 0.0, 0.001)
    made: list[int] = []
    canvas = engine.canvas(REQUEST)

    def make(i: int):
        made.append(i)
        return FixedLengthRun(denoiser, canvas, SLOW)

    first = engine.scheduler.submit(lambda: make(0), lambda: False, rows=StepRows(canvas.span_positions().numel()))
    cancel = CancelToken()
    waiting = engine.scheduler.submit(lambda: make(1), lambda: cancel.cancelled,
                                      rows=StepRows(canvas.span_positions().numel()))
    cancel.cancel()
    with pytest.raises(Cancelled):
        waiting.result(timeout=60)
    first.result(timeout=60)
    assert made == [0]
    assert engine.scheduler.stats()["droppedBeforeStart"] == 1


def test_step_slack_below_one_is_refused(denoiser):
    with pytest.raises(ValueError, match="slack"):
        StepScheduler(denoiser, slack=0.5)

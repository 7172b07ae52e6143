"""The step scheduler's policy: the step-cost model, how long requests stay wanted, which
requests share a step, and that a waiting request costs nothing until it joins one."""
from __future__ import annotations

import threading
import time

import pytest

from dllm_lsp.engine.batching import Job, Patience, StepCost, StepScheduler
from dllm_lsp.engine.denoise import Cancelled, FixedLengthRun
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

    def __init__(self, fixed: float, per_row: float) -> None:
        super().__init__()
        for rows in (8, 16, 32, 64, 128, 256):
            super().observe(rows, fixed + per_row * rows)
        assert self.fit() == pytest.approx((fixed, per_row))

    def observe(self, rows: int, seconds: float) -> None:
        pass


def test_step_cost_recovers_fixed_and_per_row_parts():
    cost = StepCost()
    assert cost.fit() is None and cost.predict(32) is None
    for rows in (32, 64, 32, 96, 128, 32):
        cost.observe(rows, 0.004 + 0.0002 * rows)
    fixed, per_row = cost.fit()
    assert fixed == pytest.approx(0.004, rel=1e-6) and per_row == pytest.approx(0.0002, rel=1e-6)
    assert cost.predict(100) == pytest.approx(0.024, rel=1e-6)


def test_step_cost_of_one_size_is_unknown_but_proportional_is_offered():
    cost = StepCost()
    for _ in range(10):
        cost.observe(32, 0.008)
    assert cost.fit() is None                          # one size: fixed and per-row cannot be told apart
    assert cost.proportional() == pytest.approx((0.0, 0.008 / 32))


def test_a_long_spell_of_one_size_keeps_the_last_fit():
    cost = StepCost()
    for rows in (32, 64, 96, 32, 64):
        cost.observe(rows, 0.001 + 0.0003 * rows)
    learnt = cost.fit()
    for _ in range(500):                               # one request at a time for a long while
        cost.observe(32, 0.001 + 0.0003 * 32)
    assert cost.fit() == learnt                        # not "unknown" (which would batch everything)


def test_patience_is_kaplan_meier_with_answers_censored():
    patience = Patience()
    for lifetime, cancelled in ((1.0, True), (2.0, False), (3.0, True), (4.0, True)):
        patience.record(lifetime, cancelled)
    assert patience.survival(0.5) == 1.0
    assert patience.survival(1.0) == pytest.approx(3 / 4)
    assert patience.survival(2.5) == pytest.approx(3 / 4)          # the answer at 2 is no event
    assert patience.survival(3.0) == pytest.approx(3 / 4 * 1 / 2)  # 2 at risk after it
    assert patience.survival(4.0) == 0.0
    assert patience.chance(0.0, 1.5) == pytest.approx(3 / 4)
    assert patience.chance(2.5, 1.0) == pytest.approx(1 / 2)
    assert patience.median() == 3.0


def test_nobody_cancels_every_chance_is_one():
    patience = Patience()
    for lifetime in (0.1, 0.2, 5.0):
        patience.record(lifetime, cancelled=False)
    assert patience.chance(0.0, 10.0) == 1.0 and patience.median() is None


def _job(rows: int, steps: int, age: float) -> Job:
    job = Job(lambda: None, lambda: False, None, rows, steps)
    job.arrived = time.monotonic() - age
    return job


def test_order_is_chance_of_being_shown_per_second_of_work(denoiser):
    scheduler = StepScheduler(denoiser)
    scheduler.cost = FrozenCost(0.0, 0.001)            # 32 rows: 32 ms a step
    # Typing: most requests are cancelled within ~0.2 s, one in five lives for seconds (a pause).
    for i in range(80):
        scheduler.patience.record(0.15 + 0.001 * i, cancelled=True)
    for i in range(20):
        scheduler.patience.record(3.0 + 0.01 * i, cancelled=True)
    fresh, stale, paused = _job(32, 2, 0.0), _job(32, 2, 0.2), _job(32, 2, 1.0)
    # `stale` is past most keystroke gaps but short of a pause: the least likely to be shown.
    assert scheduler._order([stale, fresh, paused])[-1] is stale
    # A request with one step left beats a fresh one with eight, at equal chances.
    nearly_done, new = _job(32, 1, 0.05), _job(32, 8, 0.0)
    assert scheduler._order([new, nearly_done]) == [nearly_done, new]
    # Equal chances (nobody cancels): fewest steps left first, then the oldest.
    calm = StepScheduler(denoiser)
    calm.cost = FrozenCost(0.0, 0.001)
    long, short, short_older = _job(32, 64, 0.0), _job(32, 8, 0.0), _job(32, 8, 0.5)
    assert calm._order([long, short, short_older]) == [short_older, short, long]


def _submit(engine: Engine, request: InfillRequest, settings: DecodeSettings, on_step=None):
    canvas = engine.canvas(request)
    return engine.scheduler.submit(lambda: FixedLengthRun(engine.denoiser, canvas, settings, on_step),
                                   lambda: False, rows=canvas.span_positions().numel(), steps=settings.steps)


def _frozen(engine: Engine, fixed: float, per_row: float) -> Engine:
    engine.scheduler.cost = FrozenCost(fixed, per_row)
    engine.scheduler.explore_every = 0
    return engine


def test_where_cost_is_per_row_requests_take_steps_in_turn_and_a_short_one_goes_first(denoiser):
    engine = _frozen(Engine(denoiser, step_slack=1.25), 0.0, 0.001)   # a CPU: twice the rows, twice the time
    finished: list[str] = []
    started = threading.Event()
    # 96 undecided tokens, nothing ever confident: one commit a step, 96 steps.
    long_run = _submit(engine, InfillRequest.single("def f():\n    ", "\n", 96), DecodeSettings(steps=96, threshold=1.0),
                       on_step=lambda *_: started.set())
    long_run.add_done_callback(lambda f: finished.append("long"))
    assert started.wait(60)
    short = _submit(engine, InfillRequest.single("x = ", "\n", 4), DecodeSettings(steps=4, threshold=1.0))
    short.add_done_callback(lambda f: finished.append("short"))
    short.result(timeout=60)
    long_run.result(timeout=120)
    assert finished == ["short", "long"]               # the short one did not wait for the long one
    assert engine.scheduler.largest_batch == 1         # and nothing was batched at a per-row cost


def test_where_a_step_costs_mostly_its_weights_everything_shares_it(denoiser):
    engine = _frozen(Engine(denoiser, step_slack=1.25), 0.05, 0.00001)   # a GPU: 1 or 16 requests, about one cost
    futures = [_submit(engine, REQUEST, SLOW) for _ in range(4)]
    for f in futures:
        f.result(timeout=120)
    stats = engine.scheduler.stats()
    assert stats["largestBatch"] >= 3                  # (the first may start before the others arrive)
    assert stats["forwardPasses"] < stats["requestSteps"]


def test_a_request_cancelled_while_waiting_never_costs_its_prefill(denoiser):
    engine = _frozen(Engine(denoiser, step_slack=1.25), 0.0, 0.001)
    made: list[int] = []
    canvas = engine.canvas(REQUEST)

    def make(i: int):
        made.append(i)
        return FixedLengthRun(denoiser, canvas, SLOW)

    first = engine.scheduler.submit(lambda: make(0), lambda: False, rows=canvas.span_positions().numel(), steps=16)
    cancel = CancelToken()
    waiting = engine.scheduler.submit(lambda: make(1), lambda: cancel.cancelled,
                                      rows=canvas.span_positions().numel(), steps=16)
    cancel.cancel()
    with pytest.raises(Cancelled):
        waiting.result(timeout=60)
    first.result(timeout=60)
    assert made == [0]
    assert engine.scheduler.stats()["droppedBeforeStart"] == 1


def test_step_slack_below_one_is_refused(denoiser):
    with pytest.raises(ValueError, match="slack"):
        StepScheduler(denoiser, slack=0.5)

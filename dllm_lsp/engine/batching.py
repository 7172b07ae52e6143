"""The step scheduler: concurrent requests share denoising steps.

One thread owns the model for every decoding loop (masked diffusion, DreamOn's variable
length, block diffusion): each request is a `SteppedRun` (engine/denoise.py). Requests join and leave at step
boundaries, and each keeps its own canvas, cache, step budget, stop rules, sampling and
cancellation. Every iteration the scheduler

1. takes in the requests that arrived (nothing is computed for them yet),
2. ends the cancelled or superseded ones (a waiting one costs nothing, not even its context),
   and hands back the finished ones,
3. picks this step's group: the requests in order of arrival, as many as fit in a step that
   costs at most `slack` times what the first of them costs alone, by the step-cost model
   below. A request's run is created when it first joins a group: the embedded model looks
   its context up in its prefix caches then and computes the rest in that first step, with
   its span rows (counted in the step's rows); the open checkpoints run their full pass then,
4. advances the group by one step: one forward pass over all of them where the model has a
   batched forward (`Denoiser.batch_logits`: every row through the weights together,
   attention per request), else one pass per request in turn.

Why a cost bound and not "everything, every step": batching pays when a step's cost is mostly
fixed (reading the weights: a GPU at small batch), where a step over sixteen requests costs
about what a step over one does. On a CPU a step costs in proportion to its rows; stepping
every request together then only makes each of them `n` times slower (processor sharing),
and under typing a request slowed down is a request superseded before it is shown. The cost
model is measured, not configured: `StepCost` fits seconds = fixed + per_row * span rows +
per_context_row * context rows over the recent steps, so the same rule batches everything on a
GPU and keeps groups small on a CPU.

Why first come, first served: orders that looked smarter were measured on the typing replay
and lost. Ranking requests by their chance of still being wanted when done (learnt from the
requests' own lifetimes), or by their expected time on screen, per second of work or not,
answered more keystrokes but showed fewer suggestions: they favour small, cheap requests,
which a small model mostly answers with nothing, over the line-start requests at a pause
whose suggestion the user then types through. The oldest live request is the one whose user
has waited longest, usually at a pause, when a suggestion is read (docs/serving.md has the
figures). One exception: a request that has already taken LONG_RUN_STEPS steps (options far
past the defaults) goes behind the others, so it cannot hold the model from everyone else.
"""
from __future__ import annotations

import atexit
import logging
import math
import queue
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch

from .denoise import Cancelled, DenoiseOutcome, SteppedRun, StepRows
from .denoiser import Denoiser

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH = 16
# A step may take at most this many times what its first (oldest) request's step costs alone:
# batching may slow that request by a quarter. Where the fixed part of a step dominates (a
# GPU) that admits the whole batch; where cost is proportional to rows (a CPU) requests take
# steps one after another.
DEFAULT_SLACK = 1.25
# Every this many steps the group takes one request more than the bound allows, so the cost
# model keeps seeing more than one group size (it would otherwise never learn that larger
# groups got cheaper, e.g. after a load spike).
EXPLORE_EVERY = 32
# A request that has taken this many steps leads no group while others wait: options far past the
# defaults (`steps: 256` with `remaskBelow`: hundreds of steps; a default request takes about 8 a
# window) had held the model, on a CPU where the cost bound lets no second request in, so another
# client's one-line completion waited 22x its own time.
LONG_RUN_STEPS = 64
# Shared steps that may raise (each halving the group limit) before requests step in turn for good.
MAX_SHARED_FAILURES = 3


class SchedulerClosed(RuntimeError):
    """The step scheduler was closed (its engine retired): the request runs another way."""


@dataclass(frozen=True)
class StepCoefficients:
    """Seconds a model call costs: `fixed` per pass, `per_row` per span row, `per_context_row`
    per context row (`StepRows`)."""

    fixed: float
    per_row: float
    per_context_row: float

    def predict(self, rows: StepRows, passes: int = 1) -> float:
        return passes * self.fixed + self.per_row * rows.span + self.per_context_row * rows.context


class StepCost:
    """Seconds of one step against what it carries: least squares of
    t = fixed + per_row * span_rows + per_context_row * context_rows over the recent steps
    (exponential forgetting). A model that steps requests in turn (no batched forward) pays the
    fixed part once per request (`StepCoefficients.predict(passes=...)`).

    A coefficient the recent steps cannot tell apart (every step the same span size, or no
    context rows lately) keeps its last fitted value; before it ever had one it is taken equal
    to the other per-row coefficient (a context row costs what a span row does)."""

    def __init__(self, decay: float = 0.97) -> None:
        self.decay = decay
        # Weighted sums over the steps (forgotten at `decay` per step) of 1, s, c, t and their
        # products, for s span rows, c context rows, t seconds: all the fit needs. Plain floats
        # and a 2x2 solve by hand, not numpy: its linear algebra runs on a BLAS thread pool
        # whose threads spin after each call, and on a 2-core machine that took a core from
        # the model's steps (a typing replay measured about 1 ms more per model pass with it).
        self._sums = dict.fromkeys(("w", "s", "c", "t", "ss", "cc", "sc", "st", "ct"), 0.0)
        self._last: StepCoefficients | None = None
        self._fitted = True      # `_last` is the fit of the sums as they stand (the group choice asks often)

    def observe(self, rows: StepRows, seconds: float) -> None:
        s, c, t, d = float(rows.span), float(rows.context), seconds, self.decay
        for key, value in (("w", 1.0), ("s", s), ("c", c), ("t", t), ("ss", s * s), ("cc", c * c),
                           ("sc", s * c), ("st", s * t), ("ct", c * t)):
            self._sums[key] = d * self._sums[key] + value
        self._fitted = False

    def fit(self) -> StepCoefficients | None:
        """The coefficients; while the recent steps had (nearly) one size, the last fit they
        allowed (a machine's cost structure outlives a quiet spell of one-request steps); None
        before any."""
        if self._fitted:
            return self._last
        self._fitted = True
        m = self._sums
        w = m["w"]
        if w < 4:
            return self._last
        ms, mc, mt = m["s"] / w, m["c"] / w, m["t"] / w
        # Covariances of span rows, context rows and seconds.
        vss, vcc, vsc = m["ss"] / w - ms * ms, m["cc"] / w - mc * mc, m["sc"] / w - ms * mc
        vst, vct = m["st"] / w - ms * mt, m["ct"] / w - mc * mt
        # A size varies when its spread is more than a rounding error of its size and, in rows,
        # is still there after forgetting (the last steps with context rows long past, their
        # weight decayed to nothing, tell nothing about a context row's cost any more).
        span_varies = vss > 1e-3 * m["ss"] / w and w * vss >= 1.0
        context_varies = vcc > 1e-3 * m["cc"] / w and w * vcc >= 1.0
        det = vss * vcc - vsc * vsc
        last = self._last
        if span_varies and context_varies and det > 1e-6 * vss * vcc:
            per_row = (vst * vcc - vct * vsc) / det
            per_context = (vct * vss - vst * vsc) / det
            # A context row never costs more than a span row (it goes through no more of the
            # model), and no cost is negative. Where the joint fit says otherwise (noisy
            # steps, sizes that move together) the least-squares fit under those bounds lies
            # on the bound: one slope for both kinds of row, or no cost for context rows.
            if per_row < per_context:
                per_row = per_context = (vst + vct) / (vss + vcc + 2 * vsc)
            if per_context < 0:
                per_row, per_context = vst / vss, 0.0
        elif span_varies:
            per_row = vst / vss
            per_context = min(last.per_context_row, per_row) if last is not None else per_row
        elif context_varies:
            per_context = vct / vcc
            per_row = max(last.per_row, per_context) if last is not None else per_context
        else:
            return last
        per_row, per_context = max(per_row, 0.0), max(per_context, 0.0)
        fixed = max(mt - per_row * ms - per_context * mc, 0.0)
        self._last = StepCoefficients(fixed, per_row, per_context)
        return self._last

    def proportional(self) -> StepCoefficients | None:
        """The fit, or where the steps had one size, cost in proportion to rows (no fixed part)."""
        coeffs = self.fit()
        rows = self._sums["s"] + self._sums["c"]
        if coeffs is None and rows > 0:
            per_row = self._sums["t"] / rows
            coeffs = StepCoefficients(0.0, per_row, per_row)
        return coeffs

    def predict(self, rows: StepRows) -> float | None:
        coeffs = self.fit()
        return None if coeffs is None else coeffs.predict(rows)


@dataclass
class Job:
    make_run: Callable[[], SteppedRun]
    should_stop: Callable[[], bool]
    future: Future
    rows: StepRows             # what its next step carries (span rows times candidates, context rows)
    arrived: float = field(default_factory=time.monotonic)
    run: SteppedRun | None = None
    steps: int = 0             # steps it has taken


class StepScheduler:
    def __init__(self, denoiser: Denoiser, max_batch: int = DEFAULT_MAX_BATCH,
                 slack: float = DEFAULT_SLACK) -> None:
        if not slack >= 1.0:
            raise ValueError(f"step slack must be >= 1 (got {slack})")
        self.denoiser = denoiser
        self.max_batch = max_batch
        self.slack = slack
        self.cost = StepCost()
        self.explore_every = EXPLORE_EVERY   # 0: never
        self._batched_forward = True        # until the model says it has none
        self.shared_failures = 0            # shared steps that raised (each then taken in turn)
        self._incoming: queue.SimpleQueue[Job | None] = queue.SimpleQueue()   # None: stop
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        # Counters for status and benchmarks: forward passes, the request-steps they served,
        # and the requests that ended before their first step (no context work paid).
        self.forward_passes = 0
        self.request_steps = 0
        self.largest_batch = 0
        self.dropped_waiting = 0
        self.busy_seconds = 0.0   # the thread at work (context work, steps), not waiting for requests
        self._iterations = 0
        self.closed = False

    def submit(self, make_run: Callable[[], SteppedRun], should_stop: Callable[[], bool],
               rows: StepRows = StepRows(1)) -> Future:
        """Queue a request; the future gives its DenoiseOutcome, or raises Cancelled or its error.
        `rows` sizes it for the group choice before its run exists."""
        job = Job(make_run, should_stop, Future(), rows)
        with self._start_lock:   # queued before close()'s stop, or refused: never left behind it
            if self.closed:
                raise SchedulerClosed("the step scheduler was closed")
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="dllm-steps", daemon=True)
                self._thread.start()
                # Stop the thread before the interpreter tears torch down: a daemon thread still
                # inside torch at exit can abort the process ("terminate called ...").
                atexit.register(_close_at_exit, weakref.ref(self))
            self._incoming.put(job)
        return job.future

    def close(self, timeout: float = 10.0) -> None:
        """Finish the requests in hand, then stop the thread for good: a later submit raises
        SchedulerClosed. (A late request of an evicted model had started the thread again, and
        nothing closed it: the model it held was never freed.)"""
        with self._start_lock:
            self.closed = True
            thread = self._thread
            if thread is not None and thread.is_alive():
                self._incoming.put(None)
        if thread is not None:
            thread.join(timeout)

    def run(self, make_run: Callable[[], SteppedRun], should_stop: Callable[[], bool],
            rows: StepRows = StepRows(1)) -> DenoiseOutcome:
        return self.submit(make_run, should_stop, rows).result()

    # -- the scheduler thread ------------------------------------------------------------------

    def _loop(self) -> None:
        jobs: list[Job] = []
        closing = False
        while True:
            if not jobs:
                if closing:
                    return
                job = self._incoming.get()               # idle: wait for work
                if job is None:
                    return
                jobs.append(job)
            while True:
                try:
                    job = self._incoming.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    closing = True
                    break
                jobs.append(job)
            start = time.perf_counter()
            with torch.inference_mode():
                jobs = [job for job in jobs if self._still_running(job)]
                group = self._group(jobs)
                if group:
                    self._step(group)
            self.busy_seconds += time.perf_counter() - start
            jobs = [job for job in jobs if not job.future.done()]

    def _still_running(self, job: Job) -> bool:
        """False (and the future settled) when the job ended: cancelled, failed or finished."""
        run = job.run
        if run is None:
            if job.should_stop():
                job.future.set_exception(Cancelled())
                self.dropped_waiting += 1
                return False
            return True
        if job.should_stop() and not run.needs_greedy_fill:
            job.future.set_exception(Cancelled())
            return False
        try:
            wants = run.wants_logits()     # a slot that grows opens a new session here
        except BaseException as exc:      # out of memory, say: that request fails, not the loop
            job.future.set_exception(exc)
            return False
        if not wants:
            job.future.set_result(job.run.outcome())
            return False
        job.rows = run.step_rows
        return True

    def _order(self, jobs: list[Job]) -> list[Job]:
        """First come, first served (the module docstring says why not something cleverer), except
        that a request past LONG_RUN_STEPS steps goes behind those that are not."""
        return sorted(jobs, key=lambda job: (job.steps >= LONG_RUN_STEPS, job.arrived))

    def _group(self, jobs: list[Job]) -> list[Job]:
        """This step's requests (admitted: their runs exist and want logits)."""
        order = self._order(jobs)
        group: list[Job] = []
        rows = StepRows()
        budget = None
        self._iterations += 1
        explore = bool(self.explore_every) and self._iterations % self.explore_every == 0
        for job in order:
            if len(group) >= self.max_batch:
                break
            if group:
                cost = self._predict(rows + job.rows, len(group) + 1)
                if cost is not None and budget is not None and cost > budget:
                    if not explore:
                        break
                    explore = False
            if not self._admit(job):
                continue
            if not job.run.wants_logits():       # nothing to fill: finished at once
                job.future.set_result(job.run.outcome())
                continue
            group.append(job)
            rows += job.rows
            if budget is None:
                alone = self._predict(job.rows, 1)
                budget = None if alone is None else self.slack * alone
        return group

    def _predict(self, rows: StepRows, requests: int) -> float | None:
        if self._batched_forward:
            return self.cost.predict(rows)
        # Stepped in turn: the group costs what its requests cost one by one.
        coeffs = self.cost.proportional()
        return None if coeffs is None else coeffs.predict(rows, passes=requests)

    def _admit(self, job: Job) -> bool:
        """Create the run of a job joining its first group (its context work starts); False when it failed."""
        if job.run is not None:
            return True
        try:
            job.run = job.make_run()
            job.rows = job.run.step_rows
        except BaseException as exc:   # a bad canvas, out of memory: that request fails, not the loop
            job.future.set_exception(exc)
            return False
        return True

    def _step(self, jobs: list[Job]) -> None:
        runs = [job.run for job in jobs]
        start = time.perf_counter()
        batched = None
        if len(runs) > 1 and self._batched_forward:
            try:
                batched = self.denoiser.batch_logits([r.session for r in runs], [r.ids for r in runs],
                                                     [r.rows() for r in runs])
                if batched is None:      # the model has no batched forward: step in turn from now on
                    self._stop_sharing()
            except Exception as exc:
                # Out of memory on a large group, say: this step goes in turn, and later shared
                # steps take at most half as many requests; a model whose shared steps keep
                # failing steps in turn from then on.
                self.shared_failures += 1
                self.max_batch = max(2, len(runs) // 2)
                log.warning("a shared step of %d requests failed (%s); stepping them one by one, "
                            "at most %d per shared step from now on", len(runs), exc, self.max_batch)
                if self.shared_failures >= MAX_SHARED_FAILURES:
                    self._stop_sharing()
        if batched is not None:
            self.forward_passes += 1
        self.largest_batch = max(self.largest_batch, len(runs))
        for i, job in enumerate(jobs):
            try:
                if batched is None:
                    logits = job.run.session.logits(job.run.ids, job.run.rows())
                    self.forward_passes += 1
                else:
                    logits = batched[i]
                job.run.advance(logits)
                job.steps += 1
                self.request_steps += 1
            except BaseException as exc:
                job.future.set_exception(exc)
        seconds = time.perf_counter() - start
        if self._batched_forward:
            self.cost.observe(sum((job.rows for job in jobs), StepRows()), seconds)
        else:
            # In turn: each request's pass on its own is one sample.
            for job in jobs:
                self.cost.observe(job.rows, seconds / len(jobs))

    def forget(self, cost: bool = False) -> None:
        """Zero the counters (status and benchmarks count requests, not a load's warm-up) and,
        with `cost`, what the cost model learnt (a first pass's one-off work, a Triton compile
        on a GPU, would otherwise weigh in its fit for a hundred steps)."""
        self.forward_passes = self.request_steps = self.largest_batch = self.dropped_waiting = 0
        self.busy_seconds = 0.0
        if cost:
            self.cost = StepCost()

    def _stop_sharing(self) -> None:
        self._batched_forward = False
        self.cost = StepCost()   # what it learnt assumed one pass per step

    def stats(self) -> dict:
        coeffs = self.cost.fit()
        return {"forwardPasses": self.forward_passes, "requestSteps": self.request_steps,
                "largestBatch": self.largest_batch, "droppedBeforeStart": self.dropped_waiting,
                "maxBatch": self.max_batch if self._batched_forward else 1,
                "sharedFailures": self.shared_failures,
                "busySeconds": round(self.busy_seconds, 3),
                "slack": None if math.isinf(self.slack) else self.slack,
                "stepCostMs": None if coeffs is None else
                {"fixed": round(coeffs.fixed * 1000, 3), "perRow": round(coeffs.per_row * 1000, 4),
                 "perContextRow": round(coeffs.per_context_row * 1000, 4)}}


def _close_at_exit(ref: weakref.ref) -> None:
    scheduler = ref()
    if scheduler is not None:
        scheduler.close(timeout=5.0)

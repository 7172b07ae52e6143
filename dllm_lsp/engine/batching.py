"""The step scheduler: concurrent requests share denoising steps.

One thread owns the model for fixed-length (masked-diffusion) decoding. Every iteration it
admits the requests that arrived (their context prefill runs then), drops the ones cancelled
or superseded since the last step (before they cost another step), hands back the finished
ones, and advances every other request by one step: one forward pass over all of them where
the model has a batched forward (`Denoiser.batch_logits`: the embedded model runs every row
through its weights together, attention per request), else one pass per request in turn. Requests join and leave at step boundaries and
each keeps its own canvas, cache, step budget, stop rules, sampling and cancellation, so no
request waits behind another's whole denoise.
"""
from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import torch

from .denoise import Cancelled, DenoiseOutcome, FixedLengthRun
from .denoiser import Denoiser

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH = 16


@dataclass
class Job:
    make_run: Callable[[], FixedLengthRun]
    should_stop: Callable[[], bool]
    future: Future
    run: FixedLengthRun | None = None


class StepScheduler:
    def __init__(self, denoiser: Denoiser, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        self.denoiser = denoiser
        self.max_batch = max_batch
        self._incoming: queue.SimpleQueue[Job | None] = queue.SimpleQueue()   # None: stop
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        # Counters for status and benchmarks: forward passes, and the request-steps they served.
        self.forward_passes = 0
        self.request_steps = 0
        self.largest_batch = 0

    def submit(self, make_run: Callable[[], FixedLengthRun], should_stop: Callable[[], bool]) -> Future:
        """Queue a request; the future gives its DenoiseOutcome, or raises Cancelled or its error."""
        job = Job(make_run, should_stop, Future())
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="dllm-steps", daemon=True)
                self._thread.start()
                # Stop the thread before the interpreter tears torch down: a daemon thread still
                # inside torch at exit can abort the process ("terminate called ...").
                atexit.register(_close_at_exit, weakref.ref(self))
        self._incoming.put(job)
        return job.future

    def close(self, timeout: float = 10.0) -> None:
        """Finish the requests in hand, then stop the thread (new submits start it again)."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._incoming.put(None)
            thread.join(timeout)

    def run(self, make_run: Callable[[], FixedLengthRun], should_stop: Callable[[], bool]) -> DenoiseOutcome:
        return self.submit(make_run, should_stop).result()

    # -- the scheduler thread ------------------------------------------------------------------

    def _loop(self) -> None:
        active: list[Job] = []
        closing = False
        while True:
            if not active:
                if closing:
                    return
                job = self._incoming.get()               # idle: wait for work
                if job is None:
                    return
                active.append(job)
            while len(active) < self.max_batch:
                try:
                    job = self._incoming.get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    closing = True
                    break
                active.append(job)
            with torch.inference_mode():
                active = [job for job in active if self._admit(job)]
                stepping = [job for job in active if self._still_running(job)]
                if stepping:
                    self._step(stepping)
            active = [job for job in active if not job.future.done()]

    def _admit(self, job: Job) -> bool:
        """Create the run of a new job (its prefill); False when the job ended here."""
        if job.run is not None:
            return True
        if job.should_stop():
            job.future.set_exception(Cancelled())
            return False
        try:
            job.run = job.make_run()
        except BaseException as exc:   # a bad canvas, out of memory: that request fails, not the loop
            job.future.set_exception(exc)
            return False
        return True

    def _still_running(self, job: Job) -> bool:
        run = job.run
        if job.should_stop() and not run.needs_greedy_fill:
            job.future.set_exception(Cancelled())
            return False
        if not run.wants_logits():
            job.future.set_result(run.outcome())
            return False
        return True

    def _step(self, jobs: list[Job]) -> None:
        runs = [job.run for job in jobs]
        try:
            batched = self.denoiser.batch_logits([r.session for r in runs], [r.ids for r in runs],
                                                 [r.rows() for r in runs])
        except BaseException as exc:
            log.warning("batched step failed (%s); stepping the requests one by one", exc)
            batched = None
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
                self.request_steps += 1
            except BaseException as exc:
                job.future.set_exception(exc)

    def stats(self) -> dict:
        return {"forwardPasses": self.forward_passes, "requestSteps": self.request_steps,
                "largestBatch": self.largest_batch}


def _close_at_exit(ref: weakref.ref) -> None:
    scheduler = ref()
    if scheduler is not None:
        scheduler.close(timeout=5.0)

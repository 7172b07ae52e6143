"""The step scheduler: concurrent requests share denoising steps (one forward pass for
the embedded model and for the open checkpoints' cached steps), join and leave at step
boundaries, and each keeps its own result, budget and cancellation."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from dllm_lsp.checkpoints.tiny import write_tiny_checkpoint
from dllm_lsp.engine.batching import LONG_RUN_STEPS, SchedulerClosed
from dllm_lsp.engine.denoise import Cancelled, FixedLengthRun
from dllm_lsp.engine.engine import CancelToken, Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, Slot
from dllm_lsp.loader import load_model

from .together import infill_together

REQUESTS = [
    InfillRequest.single("def area(width, height):\n    return ", "\n\nprint(area(2, 3))\n", 12),
    InfillRequest.single("import os\n" * 30 + "path = os.path.join(", ")\n", 6, single_line=True),
    InfillRequest(["class Stack:\n    def push(self, x):\n", "\n    def pop(self):\n", "\n"], [Slot(9), Slot(5)]),
    InfillRequest.single("x = 1\n", "", 20),
]
SLOW = DecodeSettings(steps=16, threshold=1.0)   # no early commits: every request takes all its steps


@pytest.fixture(scope="module")
def denoiser(tiny_model_dir):
    return load_model(tiny_model_dir, "cpu")


@pytest.mark.parametrize("kernels", ["reference", "triton"])
def test_one_forward_gives_each_request_its_own_logits(denoiser, kernels, monkeypatch):
    monkeypatch.setenv("DLLM_LSP_KERNELS", kernels)   # triton: the kernels in the interpreter
    engine = Engine(denoiser)
    canvases = [engine.canvas(r) for r in REQUESTS]
    sessions = [denoiser.session(c, n) for c, n in zip(canvases, (1, 2, 1, 3))]
    ids = [c.ids[None].repeat(n, 1) for c, n in zip(canvases, (1, 2, 1, 3))]
    for row in ids[1]:                       # a partly filled canvas: committed tokens in the span
        row[canvases[1].span_positions()[:2]] = torch.tensor([40, 41])
    batched = denoiser.batch_logits(sessions, ids)
    assert batched is not None and len(batched) == 4
    for session, canvas_ids, got in zip(sessions, ids, batched):
        want = session.logits(canvas_ids)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_concurrent_requests_share_steps_and_get_what_they_get_alone(denoiser):
    alone = Engine(denoiser, batching=False)
    want = [alone.infill(r, SLOW).candidates for r in REQUESTS]
    engine = Engine(denoiser)
    assert infill_together(engine, REQUESTS, SLOW) == want
    stats = engine.scheduler.stats()
    assert stats["largestBatch"] >= 2
    assert stats["forwardPasses"] < stats["requestSteps"]    # steps were shared


def test_a_cancelled_request_leaves_at_a_step_boundary_and_the_others_finish(denoiser):
    engine = Engine(denoiser)
    cancel = CancelToken()
    steps_seen: list[int] = []

    def on_step(state):
        steps_seen.append(state.step)
        if state.step == 3:
            cancel.cancel()

    outcome: dict = {}

    def victim():
        try:
            engine.infill(REQUESTS[0], SLOW, cancel, on_step)
        except Cancelled:
            outcome["victim"] = "cancelled"

    def other():
        outcome["other"] = engine.infill(REQUESTS[3], SLOW).steps

    threads = [threading.Thread(target=victim), threading.Thread(target=other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    alone = Engine(denoiser, batching=False).infill(REQUESTS[3], SLOW).steps   # its slot grows: 16 + 4 steps
    assert outcome == {"victim": "cancelled", "other": alone}
    assert max(steps_seen) == 3                 # no step after the cancel


def test_a_request_that_fails_fails_alone(denoiser):
    engine = Engine(denoiser)
    good = engine.scheduler.submit(lambda: _run(engine, REQUESTS[0]), lambda: False)
    bad = engine.scheduler.submit(_broken, lambda: False)
    assert bad.exception(timeout=60).args == ("no canvas",)
    assert good.result(timeout=60).steps >= 1


def _run(engine, request):
    return FixedLengthRun(engine.denoiser, engine.canvas(request), SLOW)


def _broken():
    raise ValueError("no canvas")


# (A random checkpoint's logits are nearly flat: a shared step's float rounding, ~1e-6, can flip a
# near-tie on longer spans, so the exact comparisons with the serial engine use these.)
CHECKPOINT_REQUESTS = [InfillRequest.single("def f(x):\n    return ", "\n", 8), InfillRequest.single("a = [", "]\n", 6),
                       InfillRequest.single("import os\n" * 12 + "p = os.path.", "\n", 5)]


@pytest.mark.parametrize("layout", ["dream", "llada"])
def test_open_checkpoints_share_their_cached_steps(tmp_path, layout):
    denoiser = load_model(write_tiny_checkpoint(tmp_path / layout, layout), "cpu")
    assert denoiser.batch_logits([], []) is None
    requests = CHECKPOINT_REQUESTS
    want = [Engine(denoiser, batching=False).infill(r, SLOW).candidates for r in requests]
    # Unbounded slack: every request joins every step (what a GPU's step-cost model decides).
    engine = Engine(denoiser, step_slack=float("inf"))
    futures = []
    for r in requests:
        canvas = engine.canvas(r)
        futures.append(engine.scheduler.submit(
            lambda c=canvas: FixedLengthRun(denoiser, c, SLOW),
            lambda: False))
    got = [engine.decode_slots(f.result(timeout=120).canvas.widths, f.result().span_ids, None) for f in futures]
    assert got == want
    stats = engine.scheduler.stats()
    assert stats["largestBatch"] == 3, stats
    # Each request's first step is its own full pass; the cached steps after it were shared.
    assert stats["forwardPasses"] < stats["requestSteps"] - len(requests), stats


def test_prefix_caches_of_two_documents_survive_each_other(denoiser):
    engine = Engine(denoiser)
    a = InfillRequest.single("def first_document():\n    value = 1\n    return ", "\n", 6)
    b = InfillRequest.single("class SecondDocument:\n    name = 'x'\n    def f(self):\n        ", "\n", 6)
    engine.infill(a, DecodeSettings(steps=2))
    engine.infill(b, DecodeSettings(steps=2))
    typed = InfillRequest.single(a.prefix + "v", "\n", 6)     # back in the first document, one key later
    engine.infill(typed, DecodeSettings(steps=2))
    assert denoiser.last_reused_tokens >= len(denoiser.encode(a.prefix)) - 2


def test_a_long_request_does_not_hold_the_model_from_a_short_one(denoiser):
    """A request with options far past the defaults (hundreds of steps) goes behind others once
    past LONG_RUN_STEPS: a short request that arrives meanwhile is answered before it ends.
    max_batch 1 stands for a CPU, where the cost bound lets no second request into a step."""
    engine = Engine(denoiser)
    engine.scheduler.max_batch = 1
    long_steps: list[int] = []
    long_settings = DecodeSettings(steps=LONG_RUN_STEPS * 3, remask_below=0.999, slot_start_tokens=0)
    long = threading.Thread(target=lambda: engine.infill(
        InfillRequest.single("def long_request(x):\n    ", "\n", 24), long_settings,
        on_step=lambda state: long_steps.append(state.step)))
    long.start()
    while len(long_steps) < 3 and long.is_alive():
        time.sleep(0.001)
    short = engine.infill(REQUESTS[1], DecodeSettings(steps=4))
    running = long.is_alive()
    long.join()
    assert short.steps >= 1
    assert len(long_steps) > LONG_RUN_STEPS * 2, "the long request should take its hundreds of steps"
    assert running, "the short request waited for the long one's whole denoise"


def test_typing_a_word_at_a_time_in_one_document_keeps_the_other_documents_entry(denoiser):
    """Typing with text after the cursor: each keystroke's context matches the last one's only up
    to the cursor (the suffix moved). Its entry replaces the one it grew from; one entry per word
    typed had pushed every other document's out of the cache."""
    engine = Engine(denoiser)
    denoiser.forget_requests()
    other = InfillRequest.single("class SecondDocument:\n    name = 'x'\n    def f(self):\n        ", "\n    pass\n", 6)
    engine.infill(other, DecodeSettings(steps=2))
    prefix, suffix = "def first_document(values):\n    total = 0\n    ", "\n    return total\n"
    for word in ["for", " value", " in", " values", ":", " total", " +=", " value", " *", " 2", " +", " 1"]:
        prefix += word
        engine.infill(InfillRequest.single(prefix, suffix, 6), DecodeSettings(steps=2))
    assert len(denoiser._prefix_caches) <= 3
    engine.infill(InfillRequest.single(other.prefix + "r", other.suffix, 6), DecodeSettings(steps=2))
    assert denoiser.last_reused_tokens >= len(denoiser.encode(other.prefix)) - 2


def test_one_context_computed_twice_is_kept_once(denoiser):
    request = InfillRequest.single("def twice(x):\n    return ", "\n\nprint(twice(2))\n", 6)
    lookup = denoiser._lookup(Engine(denoiser).canvas(request))
    kv = denoiser._empty_kv()
    denoiser.remember(lookup, kv)
    denoiser.remember(lookup, kv)       # the second of two requests that both missed
    assert sum(c.holds(lookup.ids, lookup.positions) for c in denoiser._prefix_caches) == 1
    denoiser.forget_requests()          # (an entry without its keys/values: no later test may reuse it)


def test_close_finishes_the_work_in_hand_and_a_later_request_runs_alone(denoiser):
    """An evicted model's engine is closed; a request planned on it that arrives late is answered
    without starting the thread again (which then held the model for good)."""
    engine = Engine(denoiser)
    first = engine.scheduler.submit(lambda: _run(engine, REQUESTS[0]), lambda: False)
    engine.close()
    assert first.done() and first.result().steps >= 1
    assert not engine.scheduler._thread.is_alive()
    with pytest.raises(SchedulerClosed):
        engine.scheduler.submit(lambda: _run(engine, REQUESTS[1]), lambda: False)
    assert engine.infill(REQUESTS[3], DecodeSettings(steps=2)).steps >= 1   # answered, alone
    assert not engine.scheduler._thread.is_alive()
    assert not [t for t in threading.enumerate() if t is engine.scheduler._thread]


class ShortOfMemory:
    """The loaded model, whose shared steps of more than `fits` requests run out of memory, as a
    GPU's would (a CPU has no such limit to hit)."""

    def __init__(self, denoiser, fits: int) -> None:
        self._denoiser, self.fits, self.refused = denoiser, fits, 0

    def __getattr__(self, name):
        return getattr(self._denoiser, name)

    def batch_logits(self, sessions, ids, rows=None):
        if len(sessions) > self.fits:
            self.refused += 1
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (a shared step of %d)" % len(sessions))
        return self._denoiser.batch_logits(sessions, ids, rows)


def test_a_shared_step_out_of_memory_goes_in_turn_and_later_groups_are_smaller(tmp_path):
    real = load_model(write_tiny_checkpoint(tmp_path / "dream", "dream"), "cpu")
    want = [Engine(real, batching=False).infill(r, SLOW).candidates for r in CHECKPOINT_REQUESTS]
    model = ShortOfMemory(real, fits=2)
    engine = Engine(model, step_slack=float("inf"))
    futures = [engine.scheduler.submit(lambda r=r: FixedLengthRun(model, engine.canvas(r), SLOW), lambda: False)
               for r in CHECKPOINT_REQUESTS]
    got = [engine.decode_slots(f.result(timeout=120).canvas.widths, f.result().span_ids, None) for f in futures]
    assert got == want                                   # nothing lost: every request as it is alone
    stats = engine.scheduler.stats()
    assert 1 <= model.refused == stats["sharedFailures"] < 3, stats
    assert stats["maxBatch"] == 2 and stats["forwardPasses"] < stats["requestSteps"], stats   # still shared, by two

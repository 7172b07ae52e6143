"""HumanEval-Infilling through the engine: fill each task's middle, execute, score pass@1.

Three settings: "unknown" gives the model a slot of a fixed size and lets it end the span with
pads (what an editor does: the true length is unknown), "oracle" gives a slot exactly as long as
the canonical middle's tokens (exposes how much the length costs), and "editor" opens each task as
a document with the cursor where the middle goes (its indentation typed, as pressing Enter leaves
it) and completes it the way the server does: the span planner picks the span, the engine fills
it, post-processing decides what is shown (Task.in_editor, pipeline.py). A task passes there only
when a completion was shown and the program with it passes; `shown` counts the completions shown.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from dllm_lsp import pipeline
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, InfillResult
from dllm_lsp.options import Options
from dllm_lsp.pipeline import Confidence, shown_confidence
from dllm_lsp.syntax.snapshot import Snapshot

from .execution import Outcome, run_programs
from .tasks import Task

MODES = ("unknown", "oracle", "editor")


@dataclass
class ModeResult:
    mode: str
    tasks: int
    passed: int
    mean_steps: float
    tokens_per_step: float
    mean_latency_ms: float
    seconds: float
    failures: dict[str, int] = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)
    planned: int | None = None     # tasks the mode was to run, where time (`deadline`) stopped it first
    shown: int | None = None       # "editor": completions post-processing let through
    confidence: dict | None = None  # how well confidence tells passing from failing (confidence_report)
    alternatives: dict | None = None  # "editor" with `alternatives` > 1: what the other suggestions add

    @property
    def pass_at_1(self) -> float:
        return self.passed / self.tasks if self.tasks else 0.0

    def to_json(self, with_samples: bool = False) -> dict:
        out = {"mode": self.mode, "tasks": self.tasks, "passed": self.passed, "pass@1": round(self.pass_at_1, 4),
               "mean_steps": round(self.mean_steps, 2), "tokens_per_step": round(self.tokens_per_step, 2),
               "mean_latency_ms": round(self.mean_latency_ms, 1), "seconds": round(self.seconds, 1),
               "failures": self.failures}
        if self.planned is not None:
            out["planned"] = self.planned
        if self.shown is not None:
            out["shown"] = self.shown
            out["passed_when_shown"] = round(self.passed / self.shown, 4) if self.shown else None
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.alternatives is not None:
            out["alternatives"] = self.alternatives
        if with_samples:
            out["samples"] = self.samples
        return out


# The shares of the completions a confidence gate would keep, most confident first, that the
# report lists (what threshold keeps them, and how many of them pass).
GATE_KEEPS = (1.0, 0.9, 0.75, 0.5, 0.25)


def auroc(scores: list[float], passed: list[bool]) -> float | None:
    """The chance that a passing completion scores above a failing one (ties half): 0.5 is no
    better than a coin, 1.0 a perfect gate. None without both kinds."""
    ranked = sorted(zip(scores, passed))
    positives = sum(passed)
    negatives = len(passed) - positives
    if not positives or not negatives:
        return None
    rank_sum, i = 0.0, 0
    while i < len(ranked):          # average ranks over ties
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        rank_sum += sum(1 for _, p in ranked[i:j] if p) * (i + j + 1) / 2
        i = j
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def confidence_report(confidences: list[Confidence | None], passed: list[bool]) -> dict | None:
    """For the completions shown that carry a confidence: how well their mean and least token
    confidence rank passing above failing ones (AUROC), and what a `minConfidence` gate on the
    mean would keep (GATE_KEEPS: the threshold, completions kept, of them passing)."""
    pairs = [(c, p) for c, p in zip(confidences, passed) if c is not None]
    if not pairs:
        return None
    means = sorted((c.mean for c, _ in pairs), reverse=True)
    gates = []
    for keep in GATE_KEEPS:
        threshold = means[max(1, round(keep * len(means))) - 1]
        kept = [p for c, p in pairs if c.mean >= threshold]
        gates.append({"keep": keep, "min_confidence": round(threshold, 4), "shown": len(kept), "passed": sum(kept)})
    rounded = (lambda x: None if x is None else round(x, 4))
    return {"with_confidence": len(pairs), "passed": sum(p for _, p in pairs),
            "auroc_mean": rounded(auroc([c.mean for c, _ in pairs], [p for _, p in pairs])),
            "auroc_least": rounded(auroc([c.least for c, _ in pairs], [p for _, p in pairs])),
            "gates": gates}


def slot_tokens(engine: Engine, task: Task, mode: str, unknown_tokens: int) -> int:
    if mode == "unknown":
        return unknown_tokens
    return max(1, len(engine.denoiser.encode(task.canonical_solution)))


def evaluate(engine: Engine, tasks: list[Task], mode: str, settings: DecodeSettings, unknown_tokens: int,
             timeout: float = 10.0, workers: int = 2, log=None, concurrency: int = 1,
             options: Options = Options(), typed_chars: int = 0, typed_through: str = "",
             deadline: float | None = None) -> ModeResult:
    """`concurrency` tasks are infilled at once: the engine's step scheduler gives their steps
    one forward pass where that pays (on a GPU, nearly the cost of one request's step).
    `deadline` (time.monotonic()): no task is started after it; the tasks infilled by then are
    executed and scored (`planned` says how many there were to run), so a time box leaves a figure.
    `options`: the server's options the "editor" mode plans and post-processes with (its
    decoding is `settings`, as in the other modes) after the user typed `typed_chars` characters of
    the line, or its text through its first character from `typed_through` (Task.in_editor)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if mode == "oracle":
        settings = replace(settings, slot_start_tokens=0)   # the slot is the span's length: nothing to grow into
    if mode != "editor":     # alternatives are the editor's: the benchmark's own modes score the greedy text
        settings = replace(settings, n=1, temperature=0.0, greedy_first=False)
    t0 = time.perf_counter()

    def infill(task: Task) -> Filled:
        if mode == "editor":
            return complete_in_editor(engine, task, settings, options, typed_chars, typed_through)
        result = engine.infill(InfillRequest.single(task.prompt, task.suffix,
                                                    slot_tokens(engine, task, mode, unknown_tokens),
                                                    language="python"), settings)
        confidence = (shown_confidence(result.text, result.text, result.confidences[0][0])
                      if result.confidences else None)
        return Filled(result, result.text, task.program(result.text), confidence)

    filled: list[Filled] = []
    planned = len(tasks)
    # Without a deadline one batch; with one, batches of a few rounds of `concurrency`, the
    # deadline checked between them (a batch's tail shares its steps with fewer requests).
    size = planned if deadline is None else max(16, 4 * concurrency)
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        for first in range(0, planned, size):
            if deadline is not None and time.monotonic() >= deadline:
                break
            for one in pool.map(infill, tasks[first:first + size]):   # in task order, `concurrency` in flight
                filled.append(one)
                if log and len(filled) % 100 == 0:
                    log(f"{mode}: {len(filled)}/{planned} infilled")
    tasks = tasks[:len(filled)]
    results = [f.result for f in filled]
    completions = [f.completion for f in filled]
    programs = [f.program for f in filled]
    confidences = [f.confidence for f in filled]
    steps = sum(r.steps for r in results)
    committed = sum(r.tokens_committed for r in results)
    latency = sum(r.latency_ms for r in results)
    shown = [i for i, c in enumerate(completions) if c is not None]     # nothing shown: nothing to run
    ran = iter(run_programs([programs[i] for i in shown], timeout, workers))
    outcomes = [next(ran) if c is not None else Outcome(False, "nothing shown") for c in completions]
    failures: dict[str, int] = {}
    for o in outcomes:
        if o.reason == "nothing shown":
            failures[o.reason] = failures.get(o.reason, 0) + 1
        elif not o.passed:
            kind = o.reason.split(":")[0] if o.reason == "timeout" else o.reason.split(":")[1].strip().split(" ")[0] \
                if ":" in o.reason else o.reason
            failures[kind] = failures.get(kind, 0) + 1
    n = len(tasks)
    return ModeResult(
        mode=mode, tasks=n, passed=sum(o.passed for o in outcomes), mean_steps=steps / max(n, 1),
        tokens_per_step=committed / max(steps, 1), mean_latency_ms=latency / max(n, 1),
        planned=planned if n < planned else None,
        seconds=time.perf_counter() - t0, failures=dict(sorted(failures.items(), key=lambda kv: -kv[1])[:8]),
        samples=[{"task_id": t.task_id, "completion": f.completion, "passed": o.passed, "reason": o.reason,
                  "confidence": None if f.confidence is None else f.confidence.to_json(),
                  **({"alternatives": list(f.alternatives)} if settings.n > 1 else {})}
                 for t, f, o in zip(tasks, filled, outcomes)],
        shown=sum(c is not None for c in completions) if mode == "editor" else None,
        confidence=confidence_report(confidences, [o.passed for o in outcomes]),
        alternatives=alternatives_report(filled, outcomes, timeout, workers) if settings.n > 1 else None,
    )


@dataclass
class Filled:
    """One task infilled: the result, the completion shown (None: nothing, and then no program),
    the program it runs as, its confidence, and the programs of its alternatives (editor mode)."""

    result: InfillResult
    completion: str | None
    program: str | None
    confidence: Confidence | None = None
    alternatives: tuple[str, ...] = ()
    alternative_programs: tuple[str, ...] = ()


def alternatives_report(filled: list[Filled], outcomes: list[Outcome], timeout: float, workers: int) -> dict:
    """What the alternatives add: how many tasks offered any and how many in all, and how many
    tasks pass with the first suggestion or one of the others (what a user who cycles through
    them and accepts the right one gets: pass@1 of the first against pass@N of the offered)."""
    programs = [p for f in filled for p in f.alternative_programs]
    ran = iter(run_programs(programs, timeout, workers))
    passed_any = 0
    for f, outcome in zip(filled, outcomes):
        others = [next(ran).passed for _ in f.alternative_programs]
        passed_any += outcome.passed or any(others)
    return {"tasks_with_alternatives": sum(bool(f.alternatives) for f in filled),
            "alternatives_shown": sum(len(f.alternatives) for f in filled),
            "passed_first": sum(o.passed for o in outcomes), "passed_any": passed_any}


def complete_in_editor(engine: Engine, task: Task, settings: DecodeSettings, options: Options,
                       typed_chars: int = 0, typed_through: str = "") -> Filled:
    """The task as a file in an editor (Task.in_editor), completed at its cursor as the server
    completes: the text shown with the program it makes and the alternatives offered beside it,
    or no completion where the editor would show nothing (a failed task)."""
    document, cursor = task.in_editor(typed_chars, typed_through)
    plan = replace(pipeline.plan(Snapshot.parse(document, "python"), cursor, options,
                                 model_context=engine.denoiser.max_context,
                                 model_max_slot=engine.denoiser.max_slot), decode=settings)
    result = plan.run(engine)
    completion = plan.finish(result)
    if completion is None:
        return Filled(result, None, None)

    def program(found) -> str:
        return task.run_as(document[:found.start] + found.text + document[found.end:])

    return Filled(result, completion.text, program(completion), completion.confidence,
                  tuple(a.text for a in completion.alternatives), tuple(map(program, completion.alternatives)))

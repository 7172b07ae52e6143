"""Plan + finish per request on the overhead benchmark's 2,000-line Python file (model excluded).

Each cursor: remove the rest of its line (the user is about to type it), plan there, and finish
with the removed text as the completion, so every request runs the whole post-processing,
parse check included. Each request is timed 5 times and the fastest kept (shared machines).
Run: python tests/planner/measure_overhead.py
"""
import statistics
import time

from dllm_lsp.bench.overhead import cursor_offsets, synthetic_python
from dllm_lsp.syntax.document import ParsedDocument
from dllm_lsp.planner.spans import PlannerSettings, plan_span
from dllm_lsp.postprocess import finish


def main(requests: int = 200) -> None:
    text = synthetic_python()
    doc = ParsedDocument(text, "python")
    settings = PlannerSettings()
    plan_ms, finish_ms, total_ms = [], [], []
    for offset in cursor_offsets(text, requests, 1):
        line_end = doc.text.find("\n", offset)
        removed = doc.text[offset:line_end]
        doc.edit(offset, line_end, "")
        best = [float("inf")] * 3
        for _ in range(5):
            t0 = time.perf_counter()
            plan = plan_span(doc.snapshot, offset, settings)
            t1 = time.perf_counter()
            finish(plan, plan.typed_prefix + removed)
            t2 = time.perf_counter()
            best = [min(best[0], t1 - t0), min(best[1], t2 - t1), min(best[2], t2 - t0)]
        doc.edit(offset, offset, removed)
        plan_ms.append(best[0] * 1e3)
        finish_ms.append(best[1] * 1e3)
        total_ms.append(best[2] * 1e3)

    def row(values):
        return f"p50 {statistics.median(values):.2f} ms p95 {sorted(values)[int(len(values) * 0.95)]:.2f} ms"

    print(f"{text.count(chr(10))} lines, {requests} requests")
    print(f"plan {row(plan_ms)} | finish {row(finish_ms)} | plan+finish {row(total_ms)}")


if __name__ == "__main__":
    main()

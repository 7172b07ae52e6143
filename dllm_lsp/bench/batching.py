"""`dllm-lsp bench batching`: what sharing a denoising step buys on this device.

For k = 1, 2, 4, 8 concurrent requests (line tails at different spots of a generated Python
file, each with its own cached context), one denoising step of all k through the model's
batched forward (`Denoiser.batch_logits`, the step scheduler's shared step) against the k
requests' steps one after another, each followed by the same selection over the vocabulary.
The ratio is the throughput a shared step gains; the step scheduler (engine/batching.py)
learns the same curve online (`stepCostMs` in dllm/status) and batches only where it pays.

For the embedded model, also the first step of k requests that just arrived, nothing of their
context cached: one shared pass that computes their contexts with their span rows (what the
server does) against a context pass per request as it starts, then their shared step
(`serve --context-pass own`). Then what the scheduler's step-cost model learns from these
medians: with a step's rows split into span and context rows (what it does) and counted as one
(what it did), each fit's coefficients and its error on every measured step (`step_cost` in the
JSON). Medians of interleaved runs; JSON with the device, versions and settings.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from dllm_lsp.cli_errors import output_file, report as report_error, write_out
from dllm_lsp.engine.batching import StepCost
from dllm_lsp.engine.denoise import FixedLengthRun, StepRows, propose
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import ModelLoadError, load_model

from .environment import environment, percentiles
from .latency import RETURN_LINE, return_tail
from .overhead import synthetic_python

PROG = "dllm-lsp bench batching"


def spots_text(count: int) -> str:
    """The generated module the requests are cut from, with at least `count` spots (`return
    total` lines) past its first quarter: the 400-line module the figures so far were measured
    on while it has enough (about 30), else one 400 lines longer at a time."""
    lines = 400
    while True:
        text = synthetic_python(lines)
        if text.count(RETURN_LINE, len(text) // 4) >= count:
            return text
        lines += 400


def requests_at_spots(count: int, span_tokens: int) -> list[InfillRequest]:
    text = spots_text(count)
    out, at = [], len(text) // 4
    for _ in range(count):
        prefix, suffix, cut = return_tail(text, at)
        out.append(InfillRequest.single(prefix, suffix, span_tokens, True))
        at = cut + 1
    return out


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(first, second, device: torch.device, runs: int) -> tuple[dict, dict]:
    """Percentiles (ms) of `runs` timings of each of two callables, after one warm-up each,
    interleaved so that drift on a shared machine hits both alike."""
    first(), second()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(runs):
        for fn, out in ((first, samples[0]), (second, samples[1])):
            synchronize(device)
            t0 = time.perf_counter()
            fn()
            synchronize(device)
            out.append((time.perf_counter() - t0) * 1000)
    return percentiles(samples[0]), percentiles(samples[1])


def progress(message: str) -> None:
    """Progress goes to stderr: stdout is the JSON's (`--json | jq`)."""
    print(message, file=sys.stderr, flush=True)


def run_batching_bench(engine: Engine, counts: list[int], runs: int = 15, span_tokens: int = 32) -> dict:
    denoiser = engine.denoiser
    settings = DecodeSettings(steps=8)
    runs_by_request = [FixedLengthRun(denoiser, engine.canvas(r), settings)
                       for r in requests_at_spots(max(counts), span_tokens)]
    device = denoiser.device

    def shared(group):
        out = denoiser.batch_logits([r.session for r in group], [r.ids for r in group], [r.rows() for r in group])
        if out is None:          # no batched forward (or one request): what the scheduler does then
            out = [r.session.logits(r.ids, r.rows()) for r in group]
        for logits in out:
            propose(logits, settings, None)

    def in_turn(group):
        for r in group:
            propose(r.session.logits(r.ids, r.rows()), settings, None)

    rows = []
    with torch.inference_mode():
        pair = runs_by_request[:2]
        batched_forward = len(pair) == 2 and denoiser.batch_logits(
            [r.session for r in pair], [r.ids for r in pair], [r.rows() for r in pair]) is not None
        for k in counts:
            group = runs_by_request[:k]
            s, t = interleaved(lambda: shared(group), lambda: in_turn(group), device, runs)
            rows.append({"requests": k, "rows": k * span_tokens, "shared_step": s, "steps_in_turn": t,
                         "throughput_gain": round(t["p50_ms"] / s["p50_ms"], 3)})
            progress(f"{k} request(s): shared step p50 {s['p50_ms']:.2f} ms, in turn {t['p50_ms']:.2f} ms, "
                     f"gain {rows[-1]['throughput_gain']:.2f}x")
    first_steps = run_first_steps(engine, counts, runs, span_tokens, settings, shared)
    return {
        "benchmark": "one shared denoising step of k requests vs their k steps in turn",
        "first_steps": first_steps,
        "step_cost": step_cost_fits(rows, first_steps, span_tokens),
        "model": denoiser.describe(),
        "settings": {"span_tokens": span_tokens, "runs": runs, "counts": counts,
                     "module_lines": spots_text(max(counts)).count("\n"),   # the generated file the spots are in
                     "torch_threads": torch.get_num_threads(), "batched_forward": batched_forward},
        "environment": environment(str(device)),
        "cases": rows,
    }


def run_first_steps(engine: Engine, counts: list[int], runs: int, span_tokens: int, settings: DecodeSettings,
                    shared) -> list[dict] | None:
    """k fresh requests' first step: contexts in the shared pass against a context pass each
    (None for a model without the choice, `EmbeddedDenoiser.context_in_first_step`)."""
    denoiser = engine.denoiser
    if not hasattr(denoiser, "context_in_first_step"):
        return None
    canvases = [engine.canvas(r) for r in requests_at_spots(max(counts), span_tokens)]
    entries = denoiser.prefix_cache_entries
    denoiser.prefix_cache_entries = 0          # every request arrives with nothing of its context cached
    rows = []

    def first_step(group, merged: bool):
        denoiser.context_in_first_step = merged
        shared([FixedLengthRun(denoiser, canvas, settings) for canvas in group])

    try:
        with torch.inference_mode():
            for k in counts:
                group = canvases[:k]
                merged, own = interleaved(lambda: first_step(group, True), lambda: first_step(group, False),
                                          denoiser.device, runs)
                context = sum(int(c.context_mask().sum()) for c in group)
                rows.append({"requests": k, "context_tokens": context, "contexts_in_the_step": merged,
                             "context_passes_then_step": own, "gain": round(own["p50_ms"] / merged["p50_ms"], 3)})
                progress(f"{k} new request(s), {context} context tokens: first step with their contexts "
                         f"p50 {merged['p50_ms']:.2f} ms, context passes then the step {own['p50_ms']:.2f} ms, "
                         f"gain {rows[-1]['gain']:.2f}x")
    finally:
        denoiser.prefix_cache_entries, denoiser.context_in_first_step = entries, True
    return rows


def step_cost_fits(cases: list[dict], first_steps: list[dict] | None, span_tokens: int) -> dict | None:
    """The scheduler's step-cost model (`StepCost`) fitted to this run's medians: the shared
    steps (span rows only) and the first steps with their contexts (span and context rows),
    once with the rows split as the scheduler counts them and once counted as one; each fit's
    coefficients and its relative error on every step. None without first steps to tell the
    two apart, or with too few steps for the model to fit (one request count: two steps)."""
    if not first_steps:
        return None
    steps = [(StepRows(case["rows"]), case["shared_step"]["p50_ms"] / 1000) for case in cases]
    steps += [(StepRows(step["requests"] * span_tokens, step["context_tokens"]),
               step["contexts_in_the_step"]["p50_ms"] / 1000) for step in first_steps]
    fits = {}
    for name, counted in (("span_and_context_rows", lambda rows: rows),
                          ("one_count_of_rows", lambda rows: StepRows(rows.span + rows.context))):
        cost = StepCost(decay=1.0)
        for rows, seconds in steps:
            cost.observe(counted(rows), seconds)
        fit = cost.fit()
        if fit is None:    # StepCost fits from 4 steps of more than one size on
            progress(f"step cost: not fitted from {len(steps)} steps (ask for 2 request counts or more)")
            return None
        predicted = [fit.predict(counted(rows)) for rows, _ in steps]
        errors = [abs(p - seconds) / seconds for p, (_, seconds) in zip(predicted, steps)]
        fits[name] = {
            "fixed_ms": round(fit.fixed * 1000, 3), "per_row_ms": round(fit.per_row * 1000, 4),
            "per_context_row_ms": round(fit.per_context_row * 1000, 4),
            "steps": [{"span_rows": rows.span, "context_rows": rows.context, "measured_ms": round(seconds * 1000, 2),
                       "predicted_ms": round(p * 1000, 2)} for p, (rows, seconds) in zip(predicted, steps)],
            "median_error": round(statistics.median(errors), 3), "max_error": round(max(errors), 3),
        }
        progress(f"step cost, {name.replace('_', ' ')}: fixed {fit.fixed * 1000:.2f} ms, "
                 f"{fit.per_row * 1000:.3f} ms a span row, {fit.per_context_row * 1000:.3f} ms a context row; "
                 f"error median {fits[name]['median_error']:.0%}, max {fits[name]['max_error']:.0%}")
    return fits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default", help="model folder, or a shipped model's name")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--requests", default="1,2,4,8", help="concurrent request counts, comma-separated")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--span-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: 1)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=output_file, help="also write the JSON here")
    args = parser.parse_args(argv)
    try:
        counts = sorted({int(c) for c in args.requests.split(",") if c.strip()})
    except ValueError:
        return report_error(PROG, f"--requests must be comma-separated counts, not {args.requests!r}")
    if not counts or counts[0] < 1 or args.runs < 1 or args.span_tokens < 1:
        return report_error(PROG, "--requests, --runs and --span-tokens must be at least 1")
    if args.threads is not None and args.threads < 1:
        return report_error(PROG, f"--threads must be at least 1, not {args.threads}")
    torch.set_num_threads(args.threads or 1)
    try:
        engine = Engine(load_model(args.model, args.device), batching=False)
    except ModelLoadError as exc:
        return report_error(PROG, exc)
    if engine.denoiser.decoding != "fixed":
        return report_error(PROG, f"{engine.denoiser.name} decodes {engine.denoiser.decoding}: "
                                  "its requests do not share steps")
    report = run_batching_bench(engine, counts, args.runs, args.span_tokens)
    if args.out:
        write_out(args.out, json.dumps(report, indent=2) + "\n", PROG)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0

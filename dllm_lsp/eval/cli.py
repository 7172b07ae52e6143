"""`dllm-lsp eval humaneval-infilling --data FILE [--limit N] [--json]`: execute the benchmark."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import replace

import torch

from dllm_lsp.bench.environment import environment
from dllm_lsp.cli_errors import output_file, refuse_unknown_choice, report as report_error
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import CONFIDENCE_KINDS
from dllm_lsp.lifetime import cleanup_on_termination
from dllm_lsp.loader import ModelLoadError, load_model, resolve_model_path
from dllm_lsp.options import DecodeOptions, Options, PlannerOptions

from .infilling import MODES, evaluate
from .results import WEIGHTS_KEY, weights_identity, weights_label, write_result
from .tasks import benchmark_name, load_tasks, resolve_data, spread_order, spread_subset

GPU_CONCURRENCY = 16
DEFAULT_UNKNOWN_SLOT = 64   # the unknown-length slot of a model that records no trained slot width


def table(name: str, results) -> str:
    rows = [f"| {name} | span length | pass@1 | passed | shown | mean steps | tokens/step | ms/task |",
            "|---|---|---|---|---|---|---|---|"]
    for r in results:
        shown = "all" if r.shown is None else f"{r.shown}/{r.tasks}"
        rows.append(f"| | {r.mode} | {100 * r.pass_at_1:.1f}% | {r.passed}/{r.tasks} | {shown} | {r.mean_steps:.1f} | "
                    f"{r.tokens_per_step:.2f} | {r.mean_latency_ms:.0f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dllm-lsp eval", description=__doc__)
    sub = ap.add_subparsers(dest="bench", required=True)
    h = sub.add_parser("humaneval-infilling", help="HumanEval-Infilling pass@1 (greedy), executed")
    h.add_argument("--data", default="single-line",
                   help="benchmark .jsonl(.gz), or single-line / multi-line / random-span / random-span-light "
                        "(looked up in --data-dir)")
    h.add_argument("--data-dir", default=None,
                   help="folder holding the benchmark's .jsonl.gz files, from github.com/openai/human-eval-infilling "
                        "(default: $DLLM_LSP_EVAL_DATA, else ../shared/eval/human-eval-infilling beside the checkout)")
    h.add_argument("--model", default=None, help="model folder or shipped name (default: the shipped model)")
    h.add_argument("--device", default="auto")
    h.add_argument("--limit", type=int, default=None, help="evaluate N tasks spread evenly over the file")
    h.add_argument("--modes", default="unknown,oracle",
                   help="comma-separated: unknown (a slot of --max-tokens, the model ends it), oracle (a slot as "
                        "long as the reference), editor (the task opened as a file, completed at the cursor the "
                        "way the server does: planner, engine, post-processing; docs/eval.md)")
    h.add_argument("--heal-whitespace", action=argparse.BooleanOptionalAction,
                   default=PlannerOptions().heal_whitespace,
                   help="editor mode: the blanks typed before the cursor go to the model (the server's "
                        "`healWhitespace`, on by default; docs/planner.md)")
    h.add_argument("--heal-typed", action=argparse.BooleanOptionalAction,
                   default=PlannerOptions().heal_typed,
                   help="editor mode: what was typed and left out of the prefix (a word typed halfway, "
                        "the blanks before the cursor) is the start the model must write, only agreeing "
                        "tokens proposed until it is written (the server's `healTyped`, on by default; "
                        "docs/eval.md)")
    h.add_argument("--typed", type=int, default=0, metavar="N",
                   help="editor mode: the user has typed the first N characters of the line's text before "
                        "asking (the cursor may sit inside a word; default 0: at the line's start)")
    h.add_argument("--typed-through", default="", metavar="CHARS",
                   help="editor mode: the user has typed the line up to and with its first character from CHARS "
                        "(the cursor just after a bracket, dot or operator, e.g. '([.=,'); the tasks whose line "
                        "has none of them before its last character are left out")
    h.add_argument("--companion-edits", action=argparse.BooleanOptionalAction,
                   default=PlannerOptions().companion_edits,
                   help="editor mode: fill the companion import slot in the same run, as the server does with "
                        "its `companionEdits` option on (off by default, as here; docs/multisite.md)")
    h.add_argument("--max-tokens", type=int, default=None,
                   help="slot size when the length is unknown (default: the model's trained max slot, else 64)")
    # The server's budget by default: the editor mode is what a user gets (it ran 16 steps against
    # the server's 8, and showed about twice the completions a user saw).
    h.add_argument("--steps", type=int, default=DecodeOptions().steps,
                   help="denoising step budget (default: the server's `steps`)")
    h.add_argument("--threshold", type=float, default=DecodeOptions().threshold,
                   help="confidence to commit a token (default: the server's)")
    h.add_argument("--ends-in-order", action=argparse.BooleanOptionalAction, default=True,
                   help="a slot's end (pad) may only be decided at its first undecided position (the default); "
                        "--no-ends-in-order lets confident pads anywhere end the slot")
    h.add_argument("--floor-from-left", action=argparse.BooleanOptionalAction, default=True,
                   help="when too few positions are confident, commit the leftmost undecided ones (the default); "
                        "--no-floor-from-left commits the most confident ones wherever they are")
    h.add_argument("--ends-balanced", action=argparse.BooleanOptionalAction, default=DecodeOptions().ends_balanced,
                   help="a slot ends only where it has closed the brackets and strings it opened (with ends in "
                        "order; the server's `endsBalanced`, off by default; docs/eval.md)")
    h.add_argument("--confidence", choices=CONFIDENCE_KINDS, default="prob",
                   help="how a position's confidence is scored (the server's `confidence` option): top-1 "
                        "probability, top-1 minus top-2 probability, or negative entropy")
    h.add_argument("--remask-below", type=float, default=None, metavar="C",
                   help="re-open committed tokens whose confidence was below C at the next step (the server's "
                        "`remaskBelow` option; default: never). docs/eval.md compares the settings")
    h.add_argument("--min-confidence", type=float, default=DecodeOptions().min_confidence, metavar="C",
                   help="editor mode: show nothing where the completion's tokens were committed less confidently "
                        "than C on average (the server's `minConfidence`; default: off). Every mode reports how "
                        "well confidence tells passing from failing completions and what each gate would keep")
    h.add_argument("--alternatives", type=int, default=DecodeOptions().alternatives, metavar="N",
                   help="editor mode: offer up to N-1 sampled alternatives beside the completion, as the server's "
                        "`alternatives` option does, and report how many tasks pass with the first or any of them")
    h.add_argument("--slot-start-tokens", type=int, default=DecodeOptions().slot_start_tokens, metavar="N",
                   help="with the length unknown, the slot starts N tokens wide and doubles while the model fills "
                        "it (the server's `slotStartTokens`; 0: full width from the start; default 16)")
    h.add_argument("--context", type=int, default=PlannerOptions().context_tokens,
                   help="context tokens kept around the slot (default: the server's contextTokens)")
    h.add_argument("--timeout", type=float, default=10.0, help="seconds per program")
    h.add_argument("--workers", type=int, default=2, help="programs executed in parallel")
    h.add_argument("--concurrency", type=int, default=None, metavar="N",
                   help="tasks infilled at once, their denoising steps shared (default: 16 on a GPU, where a "
                        "shared step costs about one request's; 1 on a CPU)")
    h.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (1: on a shared machine more threads mostly wait on each other)")
    h.add_argument("--max-seconds", type=float, default=None, metavar="S",
                   help="stop starting tasks after S seconds of infilling (each mode its share, what one leaves "
                        "going to the next), tasks taken in an order whose every prefix is spread over the file; "
                        "what was infilled is executed and scored (the GPU job's time boxes)")
    h.add_argument("--json", action="store_true", help="print one JSON object (pass@1 = the headline figure)")
    h.add_argument("--out", type=output_file, default=None, help="also write the full results here (the per-task completions go xz-compressed beside it, NAME.samples.json.xz; dllm_lsp.eval.results.read_result reads both)")
    started = time.monotonic()
    refuse_unknown_choice(ap, argv, sub.choices, "benchmark")
    a = ap.parse_args(argv)
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    try:
        if a.threads < 0:
            raise ValueError(f"--threads must be at least 1, not {a.threads}")
        if a.threads:
            torch.set_num_threads(a.threads)
        if a.concurrency is not None and a.concurrency < 1:
            raise ValueError("--concurrency must be at least 1")
        if a.max_tokens is not None and a.max_tokens < 1:
            raise ValueError(f"--max-tokens must be at least 1, not {a.max_tokens}")
        if not a.timeout > 0:
            raise ValueError(f"--timeout must be more than 0 seconds, not {a.timeout:g}")
        if a.workers < 1:
            raise ValueError(f"--workers must be at least 1, not {a.workers}")
        if a.typed < 0:
            raise ValueError("--typed must be at least 0")
        if a.typed and a.typed_through:
            raise ValueError("--typed and --typed-through each say where the cursor is: give one")
        bad = [m for m in modes if m not in MODES]
        if bad or not modes:
            raise ValueError(f"--modes takes {' and/or '.join(MODES)}, not {a.modes!r}")
        path = resolve_data(a.data, a.data_dir)
        tasks = load_tasks(path)
        if a.typed_through:
            tasks = [task for task in tasks if task.typed_through(a.typed_through) is not None]
            if not tasks:
                raise ValueError(f"no task's line has any of {a.typed_through!r} before its last character")
        tasks = spread_subset(tasks, a.limit)
        if a.max_seconds is not None:
            if a.max_seconds <= 0:
                raise ValueError("--max-seconds must be positive")
            tasks = spread_order(tasks)
        # The decode options go through the server's schema (same checks, same meaning); the two
        # ablation flags are eval-only switches of the loop's rules.
        decode = DecodeOptions(steps=a.steps, threshold=a.threshold, confidence=a.confidence,
                               remask_below=a.remask_below, slot_start_tokens=a.slot_start_tokens,
                               ends_balanced=a.ends_balanced, min_confidence=a.min_confidence,
                               alternatives=a.alternatives)
        settings = replace(decode.decode_settings(), ends_in_order=a.ends_in_order, floor_from_left=a.floor_from_left)
        try:   # the server's schema checks --context (its contextTokens), before the model loads
            planner = PlannerOptions(context_tokens=a.context, heal_whitespace=a.heal_whitespace,
                                     heal_typed=a.heal_typed, companion_edits=a.companion_edits)
        except ValueError as exc:
            raise ValueError(f"{str(exc).replace('contextTokens', '--context')}, not {a.context}") from None
        denoiser = load_model(a.model, a.device)
        # Hashed once a run, after the load: the weights this run's figures are of.
        weights = weights_identity(resolve_model_path(a.model, denoiser.device.type))
    except (ValueError, ModelLoadError, OSError) as exc:
        return report_error("dllm-lsp eval", exc)
    # SIGTERM and SIGHUP end the run as Ctrl-C does (their default ended it on the spot: its
    # running programs spun on in sessions of their own), and an interrupted run says that it
    # wrote nothing: no partial figure, and a --out file already there is left as it was.
    written = False
    with cleanup_on_termination():
        try:
            unknown = a.max_tokens or denoiser.max_slot or DEFAULT_UNKNOWN_SLOT   # the model's widest trained slot
            engine = Engine(denoiser, context_tokens=a.context)
            log = (lambda msg: print(msg, file=sys.stderr, flush=True))   # progress: stderr, also beside --json
            concurrency = a.concurrency or (GPU_CONCURRENCY if denoiser.device.type == "cuda" else 1)
            options = Options(planner=planner, decode=decode)
            begun = time.monotonic()
            results = [evaluate(engine, tasks, m, settings, unknown, a.timeout, a.workers, log, concurrency, options,
                                typed_chars=a.typed, typed_through=a.typed_through,
                                deadline=None if a.max_seconds is None else begun + a.max_seconds * (i + 1) / len(modes))
                       for i, m in enumerate(modes)]
            name = benchmark_name(path)
            by_mode = {r.mode: r for r in results}
            headline = by_mode.get("unknown", results[0])
            summary = {
                "benchmark": name, "data": str(path), "model": denoiser.name, WEIGHTS_KEY: weights,
                "device": str(denoiser.device),
                "pass@1": round(headline.pass_at_1, 4), "tasks": len(tasks), "unknown_slot_tokens": unknown,
                "settings": {"steps": a.steps, "threshold": a.threshold, "confidence": a.confidence,
                             "remask_below": a.remask_below, "ends_in_order": a.ends_in_order,
                             "ends_balanced": a.ends_balanced, "heal_whitespace": a.heal_whitespace,
                             "heal_typed": a.heal_typed, "typed": a.typed, "typed_through": a.typed_through,
                             "companion_edits": a.companion_edits, "min_confidence": a.min_confidence, "alternatives": a.alternatives,
                             "floor_from_left": a.floor_from_left, "slot_start_tokens": engine.start_tokens(settings),
                             "context": a.context, "timeout": a.timeout, "concurrency": concurrency},
                "modes": {r.mode: r.to_json() for r in results},
                # The figures' provenance: what was run and how long it took (model load included).
                "command": "dllm-lsp eval " + shlex.join(sys.argv[1:] if argv is None else argv),
                "wall_seconds": round(time.monotonic() - started, 1),
                "environment": environment(str(denoiser.device)),
            }
            stopped = [r.mode for r in results if r.planned is not None]
            if stopped:
                summary["stopped_by_time"] = stopped
            if "unknown" in by_mode and "oracle" in by_mode:
                summary["length_gap_points"] = length_gap_points(by_mode["unknown"], by_mode["oracle"])
            if a.out:
                write_result(a.out, {**summary, "modes": {r.mode: r.to_json(with_samples=True) for r in results}})
                written = True
            if a.json:
                print(json.dumps(summary))
            else:
                print(table(name, results))
                print(f"\nmodel: {weights_label(summary)}")
                for r in results:
                    if r.confidence is not None:
                        print(confidence_line(r.mode, r.confidence), file=sys.stderr)
                if "length_gap_points" in summary:
                    print(f"\nlength gap (oracle - unknown): {summary['length_gap_points']} points")
        except (KeyboardInterrupt, SystemExit):
            if not written:
                kept = f"; {a.out} left as it was" if a.out and a.out.exists() else ""
                print(f"dllm-lsp eval: interrupted: no results written{kept}", file=sys.stderr, flush=True)
            raise
    return 0


def confidence_line(mode: str, confidence: dict) -> str:
    """How well a mode's confidence tells passing from failing completions. There is no AUROC
    while the completions with a confidence all pass or all fail (a few tasks, a weak model): the
    line says so and counts them, where it printed "AUROC None"."""
    if confidence["auroc_mean"] is None:
        return (f"{mode}: AUROC: needs passing and failing tasks ({confidence['passed']} of "
                f"{confidence['with_confidence']} with a confidence passed)")
    return (f"{mode}: confidence tells passing from failing with AUROC {confidence['auroc_mean']} (mean), "
            f"{confidence['auroc_least']} (least)")


def length_gap_points(unknown, oracle) -> float | None:
    """Oracle minus unknown pass@1 in points, over the tasks both modes ran (the same order: a
    mode stopped by time ran a prefix of the other's tasks)."""
    both = min(unknown.tasks, oracle.tasks)
    if not both:
        return None
    passes = [sum(s["passed"] for s in r.samples[:both]) for r in (oracle, unknown)]
    return round(100 * (passes[0] - passes[1]) / both, 1)


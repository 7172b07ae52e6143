"""`dllm-lsp bench overhead`: the server's own cost per request, model excluded.

Per request: span planning (tree-sitter), tokenization + canvas layout, post-processing
(suffix overlap, parse check). Requests come as in an editor: the user moves to a spot in the
file and types a word, one request per keystroke, then moves elsewhere (the first request at
each spot finds nothing cached). Keystrokes are applied with incremental reparsing, timed
separately. Runs on a 2,000-line Python file (generated, or --file). `--open-documents 0,100`
times the same requests with that many other documents open (generated 400-line modules), whose
snippets the planner looks up on every request, side by side in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

from dllm_lsp import pipeline
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import InfillResult
from dllm_lsp.cli_errors import output_file, report as report_error, write_out
from dllm_lsp.loader import ModelLoadError, load_model
from dllm_lsp.options import Options
from dllm_lsp.syntax.document import ParsedDocument

from .environment import environment, percentiles


def synthetic_python(lines: int = 2000, seed: int = 0) -> str:
    """A plausible Python module of exactly `lines` lines (classes, methods, control flow)."""
    rng = random.Random(seed)
    out: list[str] = ['"""Generated module for the overhead benchmark."""', "import os", "import sys", ""]
    n = 0
    while len(out) < lines:
        n += 1
        out += [f"class Widget{n}:", f'    """Widget number {n}."""', ""]
        out += ["    def __init__(self, size, name=None):", "        self.size = size",
                "        self.name = name or f'w{size}'", ""]
        for m in range(rng.randint(2, 5)):
            out += [f"    def method_{m}(self, items, limit={rng.randint(1, 99)}):",
                    "        total = 0",
                    "        for index, item in enumerate(items):",
                    "            if index >= limit:",
                    "                break",
                    f"            total += item * {rng.randint(2, 9)} + self.size",
                    "        return total", ""]
    return "\n".join(out[:lines]) + "\n"


WORD_LENGTH = 8          # keystrokes typed at one spot before moving elsewhere
TYPED = "total_x"


def typing_cursors(doc, count: int, seed: int):
    """Yield the cursor for each request: a random line end, then one character further per
    keystroke (the caller types the character before each request)."""
    rng = random.Random(seed)
    cursor = 0
    for i in range(count):
        if i % WORD_LENGTH == 0:
            text = doc.text
            line_start = rng.randint(0, len(text) - 1)
            line_start = text.rfind("\n", 0, line_start) + 1
            cursor = text.find("\n", line_start)
            if cursor < 0:
                cursor = len(text)   # the last line, with no newline after it
        else:
            cursor += 1
        yield cursor


def open_documents(count: int) -> list[tuple[str, str]]:
    """(uri, text) of `count` other open documents: generated 400-line modules, each its own."""
    return [(f"file:///open/module{i}.py", synthetic_python(400, seed=i + 1)) for i in range(count)]


def run_overhead(text: str, denoiser, requests: int, seed: int = 0,
                 others: list[tuple[str, str]] | None = None, options: Options | None = None) -> dict:
    """Per request, the server's own path: pipeline.plan (planner + companion slot; snippets from
    `others`, the other open documents) with `options` (default: the server's defaults), the
    engine's incremental tokenization and canvas, and CompletionPlan.finish on a stand-in model
    answer."""
    doc = ParsedDocument(text, "python")
    engine = Engine(denoiser)
    options = options or Options()
    plan_ms, tokenize_ms, finish_ms, total_ms, edit_ms = [], [], [], [], []
    for i, offset in enumerate(typing_cursors(doc, requests, seed)):
        t0 = time.perf_counter()
        if offset > 0 and i % WORD_LENGTH:
            doc.edit(offset - 1, offset - 1, TYPED[i % len(TYPED)])   # the keystroke before the request
        else:
            doc.tree  # noqa: B018  (a jump: nothing typed, the tree is already up to date)
        t1 = time.perf_counter()
        plan = pipeline.plan(doc.snapshot, offset, options, others or (), model_context=denoiser.max_context,
                             model_max_slot=denoiser.max_slot)
        t2 = time.perf_counter()
        engine.canvas(plan.request, plan.context_tokens)
        t3 = time.perf_counter()
        line_end = doc.text.find("\n", offset)
        completion = doc.text[offset:line_end] if i % 2 else "value)"
        slots = [""] * (len(plan.request.slots) - 1) + [completion]   # the companion slot (if any) left empty
        plan.finish(InfillResult([slots], steps=1, tokens_committed=1, latency_ms=0.0))
        t4 = time.perf_counter()
        edit_ms.append((t1 - t0) * 1000)
        plan_ms.append((t2 - t1) * 1000)
        tokenize_ms.append((t3 - t2) * 1000)
        finish_ms.append((t4 - t3) * 1000)
        total_ms.append((t4 - t1) * 1000)
    return {
        "request_overhead": percentiles(total_ms),
        "plan": percentiles(plan_ms),
        "tokenize_and_canvas": percentiles(tokenize_ms),
        "postprocess": percentiles(finish_ms),
        "keystroke_reparse": percentiles(edit_ms),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dllm-lsp bench overhead", description=__doc__)
    parser.add_argument("--file", help="a Python file to use instead of the generated 2,000-line one")
    parser.add_argument("--model", default="default", help="model whose tokenizer is timed")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--open-documents", default="0",
                        help="comma-separated counts of other open documents, each count timed in turn (e.g. 0,100)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=output_file, help="also write the JSON figures here")
    args = parser.parse_args(argv)
    prog = "dllm-lsp bench overhead"
    if args.requests < 1:
        return report_error(prog, f"--requests must be at least 1, not {args.requests}")
    try:
        counts = [int(n) for n in args.open_documents.split(",")]
    except ValueError:
        counts = [-1]
    if any(n < 0 for n in counts):
        return report_error(prog, f"--open-documents takes counts such as 0,100, not {args.open_documents!r}")
    try:
        text = Path(args.file).read_text(encoding="utf-8") if args.file else synthetic_python()
    except (OSError, UnicodeDecodeError) as exc:
        reason = os.strerror(exc.errno).lower() if getattr(exc, "errno", None) else "not UTF-8 text"
        return report_error(prog, f"cannot read --file {args.file}: {reason}")
    if not text:
        return report_error(prog, f"--file {args.file} is empty: there is nothing to type into")
    try:
        denoiser = load_model(args.model, "cpu")
    except ModelLoadError as exc:
        return report_error(prog, exc)
    options = Options()
    by_count = {n: run_overhead(text, denoiser, args.requests, others=open_documents(n), options=options)
                for n in counts}
    figures = by_count[counts[0]]
    report = {
        "benchmark": "server overhead per request (model excluded)",
        "settings": {"file": args.file or "generated", "lines": text.count("\n"), "requests": args.requests,
                     "keystrokes_per_spot": WORD_LENGTH, "model_tokenizer": denoiser.name,
                     "open_documents": counts,
                     # What the planner ran with (companionEdits adds the import slot's work):
                     # defaults change, and a figure means little without them.
                     "options": options.wire()},
        "environment": environment("cpu"),
        "figures": figures,
        "target": {"request_overhead_p50_ms": 2.0},
    }
    if len(counts) > 1:
        report["by_open_documents"] = {str(n): by_count[n] for n in counts}
    if args.out:
        write_out(args.out, json.dumps(report, indent=2) + "\n", prog)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for n in counts:
            if len(counts) > 1:
                print(f"{n} other documents open:")
            for name, row in by_count[n].items():
                print(f"{name:22s} p50 {row['p50_ms']:7.3f} ms   p95 {row['p95_ms']:7.3f} ms")
    return 0

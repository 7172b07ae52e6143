"""`dllm-lsp bench startup`: what an editor waits for when it starts the server and asks at once.

Each run starts the real server over stdio, initializes it, opens a Python file and asks for an
inline completion right after `initialized` (what an editor does when it opens a file at
start-up; the request waits for the model's load), then asks at the other positions one after
another. Per run it records the time to `initialize`'s answer, the time from `initialized` to
the first completion's answer (the load included), the first completion's own latency and the
later ones' (the engine's `lastLatencyMs` after each answer, from `dllm/status`).

Two server settings, interleaved run by run: the default (the load runs `Engine.prepare`: a
warm-up pass and a step-cost probe) and `serve --no-warm-up` (the first request pays the first
pass's one-off work: allocations, and on a GPU the Triton kernels' compile or cache load).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient

from dllm_lsp.cli_errors import output_file, report as report_error, write_out
from dllm_lsp.loader import ModelLoadError, read_config, resolve_device, resolve_model_path

from .environment import environment, percentiles
from .typing import STATUS_METHOD, plain

# A file with several functions whose bodies end in an open `return `: each is one request.
SOURCE = "".join(f"def measure_{name}(values, limit={i}):\n    \"\"\"The {name} of values.\"\"\"\n"
                 f"    kept = [v for v in values if v < limit]\n    return \n\n\n"
                 for i, name in enumerate(("total", "mean", "largest", "count", "spread", "middle")))
POSITIONS = [(6 * i + 3, 11) for i in range(6)]     # (line, character) at the end of each `    return `
VARIANTS = {"warm-up": [], "no-warm-up": ["--no-warm-up"]}
URI = "file:///bench-startup/measures.py"


async def one_start(args, serve_args: list[str]) -> dict:
    client = LanguageClient("dllm-lsp-bench-startup", "1")
    cmd = ["-m", "dllm_lsp", "serve", "--stdio", "--log-level", "WARNING", *serve_args]
    if args.model:
        cmd += ["--model", args.model]
    if args.device:
        cmd += ["--device", args.device]
    spawned = time.perf_counter()
    await client.start_io(sys.executable, *cmd)
    try:
        await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities()))
        initialize_s = time.perf_counter() - spawned
        client.initialized(types.InitializedParams())
        started = time.perf_counter()
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=URI, language_id="python", version=1, text=SOURCE)))
        latencies, answered = [], 0
        for i, (line, character) in enumerate(POSITIONS):
            result = await client.text_document_inline_completion_async(types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=URI), position=types.Position(line, character),
                context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))
            if i == 0:
                first_answer_s = time.perf_counter() - started
            status = plain(await client.protocol.send_request_async(STATUS_METHOD, {}))
            if status.get("error"):
                raise RuntimeError(f"the model failed to load: {status['error']}")
            latencies.append(status["lastLatencyMs"])
            answered += result is not None
        return {"initialize_s": initialize_s, "first_answer_s": first_answer_s, "first_ms": latencies[0],
                "later_ms": latencies[1:], "answered": answered, "prepared": status.get("prepared"),
                "model": status.get("model"), "device": status.get("device")}
    finally:
        try:
            await asyncio.wait_for(client.shutdown_async(None), 30)
            client.exit(None)
        except Exception:   # noqa: BLE001 - a server that went away: stop it below
            pass
        await client.stop()


def summarize(runs: list[dict]) -> dict:
    return {
        "runs": len(runs),
        "initialize_ms": percentiles([1000 * r["initialize_s"] for r in runs]),
        "first_answer_ms": percentiles([1000 * r["first_answer_s"] for r in runs]),
        "first_completion_ms": percentiles([r["first_ms"] for r in runs]),
        "later_completion_ms": percentiles([ms for r in runs for ms in r["later_ms"]]),
        "answered": sum(r["answered"] for r in runs),
        "requests": sum(1 + len(r["later_ms"]) for r in runs),
        "prepared": [r["prepared"] for r in runs],
    }


async def bench(args, log) -> dict:
    runs: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    model = device = None
    for run in range(args.runs):
        for name, serve_args in VARIANTS.items():
            result = await one_start(args, serve_args)
            model, device = result["model"], result["device"]
            runs[name].append(result)
            log(f"run {run + 1}/{args.runs} {name}: first answer {result['first_answer_s']:.2f} s after "
                f"initialized, first completion {result['first_ms']:.1f} ms, later "
                f"{sorted(result['later_ms'])[len(result['later_ms']) // 2]:.1f} ms")
    variants = {name: summarize(found) for name, found in runs.items()}
    warm, cold = variants["warm-up"], variants["no-warm-up"]
    return {
        "benchmark": "server start-up: initialize, a completion asked at once, then more",
        "environment": environment(device or args.device),
        "settings": {"model": model, "device": device, "runs": args.runs, "positions": len(POSITIONS),
                     "variants": VARIANTS, "command": "dllm-lsp bench startup " + " ".join(args.argv)},
        "variants": variants,
        # First completion with the warm-up against without it, medians of the same runs.
        "first_completion_ratio": round(warm["first_completion_ms"]["p50_ms"]
                                        / cold["first_completion_ms"]["p50_ms"], 3),
        "first_answer_ratio": round(warm["first_answer_ms"]["p50_ms"] / cold["first_answer_ms"]["p50_ms"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="dllm-lsp bench startup", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model folder or shipped name (default: the shipped model)")
    ap.add_argument("--device", default=None, help="auto, cpu, cuda (default: the server's)")
    ap.add_argument("--runs", type=int, default=5, help="server starts per setting (interleaved)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--out", type=output_file, default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    args.argv = argv
    if args.runs < 1:
        return report_error("dllm-lsp bench startup", ValueError(f"--runs must be at least 1, not {args.runs}"))
    try:   # checked here, not by the servers it starts: a bad --model or --device is one line
        if args.device:
            resolve_device(args.device)
        if args.model:
            read_config(resolve_model_path(args.model))
    except ModelLoadError as exc:
        return report_error("dllm-lsp bench startup", exc)
    log = (lambda msg: print(msg, file=sys.stderr, flush=True))
    try:
        result = asyncio.run(bench(args, log))
    except (RuntimeError, TimeoutError) as exc:
        return report_error("dllm-lsp bench startup", exc)
    except JsonRpcException as exc:    # the server answered with an error (a model that failed to load)
        return report_error("dllm-lsp bench startup", f"the server answered with an error: {exc}")
    text = json.dumps(result, indent=1)
    if args.out:
        write_out(args.out, text + "\n", "dllm-lsp bench startup")
    if args.json:
        print(text)
    else:
        # One decimal of a millisecond, as the other benchmarks' summaries and this one's progress
        # lines show them; the JSON keeps percentiles' four.
        for name, v in result["variants"].items():
            print(f"{name}: first answer p50 {v['first_answer_ms']['p50_ms']:.1f} ms after initialized, first "
                  f"completion p50 {v['first_completion_ms']['p50_ms']:.1f} ms, later p50 "
                  f"{v['later_completion_ms']['p50_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`dllm-lsp` command line: serve, complete, infill, eval, bench, train."""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from . import __version__
from .cli_errors import did_you_mean, output_file
from .serving import INSTALL_HINT as RAY_INSTALL_HINT

# Subcommands whose argument parsing lives with the code they run: name -> module with main(argv).
DELEGATED = {
    "train": "dllm_lsp.train.cli",
    "eval": "dllm_lsp.eval.cli",
    "gpujob": "dllm_lsp.gpujob.cli",
    "ray": "dllm_lsp.serving.cli",
}
BENCH_MODES = {
    "overhead": "dllm_lsp.bench.overhead",
    "kernels": "dllm_lsp.bench.kernels",
    "checkpoint": "dllm_lsp.bench.checkpoint_latency",
    "typing": "dllm_lsp.bench.typing",
    "block": "dllm_lsp.bench.block_latency",
    "batching": "dllm_lsp.bench.batching",
    "training-data": "dllm_lsp.bench.training_data",
    "startup": "dllm_lsp.bench.startup",
}
# What each mode measures, for `dllm-lsp bench --help` (the modes' own parsers live in their
# modules, which import torch: reading their descriptions here would slow every --help).
BENCH_SUMMARIES = {
    "overhead": "the server's own cost per request, model excluded (planning, post-processing)",
    "kernels": "the Triton kernels against the torch paths they replace (for a GPU)",
    "checkpoint": "open-checkpoint latency: dual cache, no cache, autoregressive (for a GPU)",
    "typing": "people typing real files through the real server over TCP, 1..N clients",
    "block": "block-diffusion latency against an autoregressive decode (for a GPU)",
    "batching": "one denoising step shared by k requests against their steps in turn",
    "training-data": "how fast one core builds training batches",
    "startup": "what an editor waits for when it starts the server and asks at once",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dllm-lsp", description="Code completion by diffusion infilling.",
                                     epilog="`dllm-lsp COMMAND --help` for a command's options; docs/cli.md")
    parser.add_argument("--version", action="version", version=f"dllm-lsp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the language server")
    mode = serve.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (default)")
    mode.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP (HOST defaults to 127.0.0.1)")
    add_model_args(serve, default=None)
    serve.add_argument("--log-file", help="write the server log here (stderr otherwise)")
    serve.add_argument("--log-level", default="INFO", metavar="LEVEL",
                       help="DEBUG, INFO (default), WARNING or ERROR")
    serve.add_argument("--batching", action=argparse.BooleanOptionalAction, default=True,
                       help="concurrent requests share denoising steps (default); --no-batching runs them one by one")
    serve.add_argument("--step-slack", type=float, default=None, metavar="X",
                       help="a batched denoising step may cost at most X times its most urgent request's "
                            "step alone (default 1.25; inf: every request in every step; docs/serving.md)")
    serve.add_argument("--max-models", type=int, default=2, metavar="N",
                       help="models held at once for connections that ask for different ones (default 2)")
    serve.add_argument("--prefix-cache", type=int, default=None, metavar="N",
                       help="context caches kept across requests (default 8; 0: none): the embedded "
                            "model's, and an open checkpoint's with the cache option \"reuse\"")
    serve.add_argument("--context-pass", choices=("first-step", "own"), default="first-step",
                       help="where the embedded model computes the context its caches lack: in the request's "
                            "first step, with its span rows (default), or in a pass of its own as the request "
                            "starts (the benchmarks' baseline; docs/serving.md)")
    serve.add_argument("--warm-up", action=argparse.BooleanOptionalAction, default=True,
                       help="after loading a model, run it once and time a few steps before the first request "
                            "(default); --no-warm-up leaves that to the first request (the baseline of "
                            "`bench startup`; docs/serving.md)")
    serve.add_argument("--ray", metavar="ADDRESS", help="send infills to the Ray Serve deployment on the Ray "
                                                         "cluster at ADDRESS (dllm-lsp ray deploy; docs/deploy.md)")
    serve.add_argument("--ray-app", default="dllm-lsp", help="the Serve application name (with --ray)")
    serve.add_argument("--token-file", help="TCP: clients must send this file's token (else $DLLM_LSP_TOKEN); "
                                            "required to listen beyond loopback (docs/deploy.md)")
    serve.add_argument("--allow-model-dir", action="append", default=[], metavar="DIR", type=existing_folder,
                       help="TCP: clients' `model` option may name model folders under DIR (repeatable); "
                            "otherwise only the shipped models and --model (docs/deploy.md)")

    complete = sub.add_parser("complete", help="print one completion at FILE:LINE:COL (1-based)")
    complete.add_argument("location", metavar="FILE:LINE:COL",
                          help="the file and the 1-based line and column to complete at, e.g. examples/hello.py:7:21")
    add_model_args(complete)
    complete.add_argument("--language", help="language id (default: from the file extension)")
    complete.add_argument("--steps", type=int, default=None, help="denoising steps (default: the server's)")
    complete.add_argument("--ends-balanced", action="store_true", default=None,
                          help="a span ends only where it has closed what it opened (the server's endsBalanced)")
    complete.add_argument("--companion-edits", action="store_true", default=None,
                          help="also fill an import slot after the file's imports; an import the completion "
                               "uses comes with it (the server's companionEdits, off by default)")
    complete.add_argument("--min-confidence", type=float, default=None, metavar="C",
                          help="show nothing when the completion's tokens were committed less confidently than C "
                               "on average (the server's minConfidence, off by default; --json reports the "
                               "confidence either way)")
    complete.add_argument("--alternatives", type=int, default=None, metavar="N",
                          help="--json: also up to N-1 sampled alternatives to the completion (the server's "
                               "alternatives option)")
    complete.add_argument("--json", action="store_true", help="print a JSON object instead of the text")

    infill = sub.add_parser("infill", help='JSONL in ({"id","prefix","suffix"}), JSONL out')
    add_model_args(infill)
    infill.add_argument("--max-tokens", type=int, default=None,
                        help="slot size when a line has no max_tokens (default: the server's maxLineTokens)")
    infill.add_argument("--steps", type=int, default=None, help="denoising steps (default: the server's)")
    infill.add_argument("--ends-balanced", action="store_true", default=None,
                        help="a span ends only where it has closed what it opened (the server's endsBalanced)")
    infill.add_argument("--concurrency", type=int, default=1, metavar="N",
                        help="lines in flight at once, sharing denoising steps (default 1; output stays in input order)")

    modes = "\n".join(f"  {name:15s}{summary}" for name, summary in BENCH_SUMMARIES.items())
    bench = sub.add_parser("bench", help=f"completion latency; modes: {', '.join(BENCH_MODES)}",
                           description="`dllm-lsp bench [options]`: completion latency (engine only, warm prefix "
                                       "cache) of a line tail\nand a block body, p50/p95 per case. "
                                       "`dllm-lsp bench MODE [options]`: one of the modes below.",
                           epilog=f"modes (`dllm-lsp bench MODE --help` for each one's options):\n{modes}",
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(bench)
    bench.add_argument("--runs", type=int, default=20, help="timed completions per case (default 20)")
    bench.add_argument("--steps", type=int, default=None, help="step budget (default: the server's `steps`)")
    bench.add_argument("--also-steps", default=None, metavar="N[,M]",
                       help="each case also with these step budgets, interleaved (`<case>_steps_N`)")
    bench.add_argument("--json", action="store_true", help="print the JSON figures instead of a table")
    bench.add_argument("--out", type=output_file, help="also write the JSON figures to this file")
    bench.add_argument("--profile", action="store_true",
                       help="also record where the line tail's time goes: host or device, launches, syncs, Python")

    for name in DELEGATED:
        sub.add_parser(name, help=f"see `dllm-lsp {name} --help`", add_help=False)
    parser.commands = sub.choices      # name -> its parser, for refuse_unknown_words
    return parser


def refuse_unknown_words(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A mistyped command or bench mode refused with the likely one named. argparse (before
    Python 3.14) listed every choice without a hint, and took `bench typng` for the latency
    benchmark with a stray argument: "unrecognized arguments: typng". Usage errors: status 2."""
    commands = parser.commands
    if argv and not argv[0].startswith("-") and argv[0] not in commands:
        parser.error(f"unknown command {argv[0]!r}{did_you_mean(argv[0], commands)} "
                     f"(commands: {', '.join(commands)})")
    if len(argv) >= 2 and argv[0] == "bench" and not argv[1].startswith("-"):
        # the latency benchmark takes no word of its own: a word here is a mode's name
        commands["bench"].error(f"unknown bench mode {argv[1]!r}{did_you_mean(argv[1], BENCH_MODES)} "
                                f"(modes: {', '.join(BENCH_MODES)}; none for the latency benchmark)")


def existing_folder(value: str) -> str:
    """An --allow-model-dir: a folder that exists now (a misspelt one would refuse every client's
    model without a word to the operator)."""
    path = os.path.expanduser(value)
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{value!r} is not a folder")
    return os.path.abspath(path)


def add_model_args(parser: argparse.ArgumentParser, default: str | None = "default") -> None:
    parser.add_argument("--model", default=default,
                        help="model folder, or a shipped model's name (default: the one models/DEFAULT names "
                             "for the device)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: $DLLM_LSP_THREADS, else 1; docs/cli.md says why)")
    parser.add_argument("--cuda-graphs", action="store_true",
                        help="replay a lone request's steady denoising steps from CUDA graphs (embedded model; "
                             "off by default until measured; `bench` times both on CUDA)")


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C anywhere (the benchmarks, a command still importing torch): the documented
        # status, without a traceback.
        return 130
    except BrokenPipeError:
        # `dllm-lsp complete ... --json | head -c0`: whoever read stdout has gone. Nothing more can
        # be said there, and the interpreter's flush at exit would print a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        try:
            module = importlib.import_module(DELEGATED[argv[0]])
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] != "ray":
                raise
            print(f"dllm-lsp {argv[0]}: error: {RAY_INSTALL_HINT}", file=sys.stderr)   # an optional extra
            return 1
        return int(module.main(argv[1:]) or 0)
    if len(argv) >= 2 and argv[0] == "bench" and argv[1] in BENCH_MODES:
        return int(importlib.import_module(BENCH_MODES[argv[1]]).main(argv[2:]) or 0)
    parser = build_parser()
    refuse_unknown_words(parser, argv)
    args = parser.parse_args(argv)
    if args.command == "serve" and args.allow_model_dir and not args.tcp:
        # Over stdio the editor is the user's own, on the user's machine: it may name any folder.
        parser.error("--allow-model-dir applies to --tcp only (over stdio the client may name any model folder)")
    from . import commands  # noqa: PLC0415  (keeps `--help` fast: no torch import)

    handler = {"serve": commands.serve, "complete": commands.complete, "infill": commands.infill,
               "bench": commands.bench}[args.command]
    try:
        return handler(args)
    except commands.UserError as exc:
        print(f"dllm-lsp: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(main())

"""`dllm-lsp` command line: serve, complete, infill, eval, bench, train."""
from __future__ import annotations

import argparse
import importlib
import sys

# Subcommands whose argument parsing lives with the code they run: name -> module with main(argv).
DELEGATED = {
    "train": "dllm_lsp.train.cli",
    "eval": "dllm_lsp.eval.cli",
}
BENCH_MODES = {
    "kernels": "dllm_lsp.bench.kernels",
    "checkpoint": "dllm_lsp.bench.checkpoint_latency",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        return int(importlib.import_module(DELEGATED[argv[0]]).main(argv[1:]) or 0)
    if len(argv) >= 2 and argv[0] == "bench" and argv[1] in BENCH_MODES:
        return int(importlib.import_module(BENCH_MODES[argv[1]]).main(argv[2:]) or 0)
    print("usage: dllm-lsp {serve,complete,infill,eval,bench,train} ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

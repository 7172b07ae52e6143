"""How every `dllm-lsp` command reports a user error: one line on stderr, exit status 1.

`dllm-lsp: error: ...` for the main commands, `dllm-lsp <sub>: error: ...` for the subcommands
with their own parsers (eval, train, bench modes, gpujob, ray). argparse's own usage errors keep
argparse's form and exit status 2. Nothing here imports torch.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def one_line(text: object) -> str:
    """The first line of an error's text (some, like torch's state-dict errors, run to dozens)."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return (lines[0] + (" ..." if len(lines) > 1 else "")) if lines else ""


def report(prog: str, exc: object) -> int:
    """Print `prog: error: exc` as one line on stderr; the exit status for a user error (1)."""
    message = one_line(exc) or type(exc).__name__
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 1


def output_file(value: str) -> Path:
    """The argparse type of `--out FILE`: a file that can be written (its missing folders are
    created when it is), checked before the run whose results it is to hold, not after it."""
    path = Path(value)
    if not value or path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is a folder, not a file")
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {value}: {existing} is a file")
    if not os.access(existing, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {value}: permission denied")
    return path


def write_out(path: str | Path, text: str) -> None:
    """Write a command's `--out` file, creating its folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)

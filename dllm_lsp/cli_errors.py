"""How every `dllm-lsp` command reports a user error: one line on stderr, exit status 1.

`dllm-lsp: error: ...` for the main commands, `dllm-lsp <sub>: error: ...` for the subcommands
with their own parsers (eval, train, bench modes, gpujob, ray). argparse's own usage errors keep
argparse's form and exit status 2. Nothing here imports torch.
"""
from __future__ import annotations

import sys


def one_line(text: object) -> str:
    """The first line of an error's text (some, like torch's state-dict errors, run to dozens)."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return (lines[0] + (" ..." if len(lines) > 1 else "")) if lines else ""


def report(prog: str, exc: object) -> int:
    """Print `prog: error: exc` as one line on stderr; the exit status for a user error (1)."""
    message = one_line(exc) or type(exc).__name__
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 1

"""How every `dllm-lsp` command reports a user error: one line on stderr, exit status 1.

`dllm-lsp: error: ...` for the main commands, `dllm-lsp <sub>: error: ...` for the subcommands
with their own parsers (eval, train, bench modes, gpujob, ray). argparse's own usage errors keep
argparse's form and exit status 2. Nothing here imports torch.

It also writes the commands' output files (`--out`, `--plot`, the eval's results): every one
through `replace_whole`, so that a file is its old bytes or all its new ones, never a part (Ctrl-C,
a full disk). It lives here, beside `output_file` that checks the same paths before a run, because
this module imports nothing of the project: the eval, the benchmarks, the training card and
`commands` all import it without a cycle.
"""
from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import stat
import sys
import tempfile
from pathlib import Path


UMASK = os.umask(0o022)     # the process's file-creation mask, read once (reading it sets it) at import,
os.umask(UMASK)             # before any threads that create files run


def one_line(text: object) -> str:
    """The first line of an error's text (some, like torch's state-dict errors, run to dozens)."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return (lines[0] + (" ..." if len(lines) > 1 else "")) if lines else ""


def did_you_mean(word: str, choices) -> str:
    """`: did you mean 'complete'?` for the choice closest to a mistyped `word`, else "" (a
    command's or a mode's name; what argparse's suggest_on_error says from Python 3.14)."""
    close = difflib.get_close_matches(word.lower(), list(choices), n=1, cutoff=0.6)
    return f": did you mean {close[0]!r}?" if close else ""


def refuse_unknown_choice(parser: argparse.ArgumentParser, argv: list[str] | None, choices, noun: str) -> None:
    """The first word of a subcommand's own parser (`eval BENCHMARK`, `train STEP`, `ray COMMAND`,
    `gpujob COMMAND`) checked before `parser` parses `argv`: a mistyped one is refused with the
    likely one named (`did_you_mean`), a missing one with what is wanted and the choices. argparse
    (before Python 3.14) listed the choices without a hint, and named a missing one by its `dest`
    ("the following arguments are required: bench"). Either is a usage error: argparse's usage,
    status 2. Only words argparse would refuse are refused: anything it accepts is left to it.
    `argv` None: the process's arguments, as for `parse_args`."""
    argv = sys.argv[1:] if argv is None else argv
    names = ", ".join(choices)
    words = [word for word in argv if not word.startswith("-")]
    if not words and not {"-h", "--help"} & set(argv):
        parser.error(f"missing the {noun} ({noun}s: {names})")
    if argv and not argv[0].startswith("-") and argv[0] not in choices:
        parser.error(f"unknown {noun} {argv[0]!r}{did_you_mean(argv[0], choices)} ({noun}s: {names})")


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


def replace_whole(path: str | Path, data: bytes) -> None:
    """`data` written to a temporary file in `path`'s folder, then renamed onto `path` (atomic
    there): `path` holds its old bytes or all the new ones, never a part. Raises OSError.

    A symbolic link keeps its place: the file it names is replaced, not the link. A path that is
    not a regular file (`/dev/stdout`, a pipe) is written straight through: a rename would put a
    file in the device's place, and a stream has no old bytes to keep."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(path, "wb") as fh:
            fh.write(data)
        return
    path = path.resolve() if path.is_symlink() else path
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False) as fh:
        temporary = Path(fh.name)
        try:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        except BaseException:
            # Closing flushes what the failed write left in the buffer, and fails again (a full
            # disk stays full): the first error is the one to report, and the temporary must go.
            with contextlib.suppress(OSError):
                fh.close()
            temporary.unlink(missing_ok=True)
            raise
    try:
        os.chmod(temporary, 0o666 & ~UMASK)   # as a plain write would have made it (not mkstemp's 0600)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def cannot_write(path: str | Path, exc: OSError) -> str:
    """`cannot write PATH: reason`, without the errno and the repeated path of OSError's text."""
    return f"cannot write {path}: {exc.strerror or exc}"


def write_out(path: str | Path, text: str, prog: str = "dllm-lsp") -> None:
    """Write a command's `--out` file whole (`replace_whole`), creating its folders. When it
    cannot be written after all (`output_file` checked it before the run, but a disk fills, a
    read-only or virtual file system refuses what `os.access` allowed root), the command ends
    here as argparse ends one: `prog: error: cannot write PATH: reason` on one line, exit 1."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_whole(path, text.encode())
    except OSError as exc:
        raise SystemExit(report(prog, cannot_write(path, exc))) from None


def write_figure(figure, path: str | Path) -> None:
    """Save a matplotlib figure to `path` whole (`replace_whole`), creating its folders, in the
    format its suffix names as `savefig` would (PNG without one). Raises OSError, or ValueError
    for a format matplotlib does not know; the figure is drawn before anything is written."""
    path = Path(path)
    buffer = io.BytesIO()
    # savefig on a path takes the format from its suffix; on a buffer it must be told.
    figure.savefig(buffer, format=path.suffix.removeprefix(".") or "png")
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_whole(path, buffer.getvalue())

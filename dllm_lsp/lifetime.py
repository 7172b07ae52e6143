"""How long the processes this project starts live: none outlives what it serves.

- A stdio server exits when the editor named by `initialize.processId` is gone, even while
  another process still holds its stdin (a forked helper, a wrapper, a proxy), as LSP asks.
- A child a command starts for itself (`bench typing`'s TCP server) ends with that command, a
  SIGKILL of the command included: the child asks the kernel for SIGTERM when its parent dies.
- A benchmark stopped by SIGTERM or SIGHUP runs its cleanup (`finally`, `with`) as Ctrl-C does.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections.abc import Iterator

log = logging.getLogger(__name__)

# Set by a parent for a child that must not outlive it: the parent's pid.
PARENT_ENV = "DLLM_LSP_PARENT_PID"
_PR_SET_PDEATHSIG = 1     # linux/prctl.h


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's: it exists
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):   # no /proc (not Linux): kill's answer stands
        return True


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) for a child that is to end with this process."""
    return {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}


def end_with_parent() -> None:
    """In a child started with `child_env`: ask for SIGTERM when the parent dies (Linux), and end
    now if it died before this could be asked. Elsewhere, and without PARENT_ENV, nothing."""
    parent = os.environ.get(PARENT_ENV, "")
    if not parent.isdecimal() or not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError) as exc:   # no prctl: the parent's own cleanup still ends it
        log.info("cannot ask to end with the parent process: %s", exc)
        return
    if os.getppid() != int(parent):
        log.warning("the process that started this one (%s) has gone: exiting", parent)
        raise SystemExit(128 + signal.SIGTERM)


@contextlib.contextmanager
def cleanup_on_termination() -> Iterator[None]:
    """Within: SIGTERM and SIGHUP raise SystemExit(128 + signal) in the main thread, so `finally`
    blocks and context managers run (the default action ends the process without them: a killed
    benchmark left its server, or its whole Ray cluster, running)."""
    def stop(signum, frame) -> None:
        raise SystemExit(128 + signum)

    wanted = [sig for sig in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if sig is not None]
    try:
        before = {sig: signal.signal(sig, stop) for sig in wanted}
    except ValueError:   # not the main thread: signals are not ours to take
        yield
        return
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)

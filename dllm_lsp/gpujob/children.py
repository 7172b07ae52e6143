"""Running one phase step as a child process: output streamed into the job log, a hard time box."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

GRACE_S = 15.0   # after SIGTERM, before SIGKILL: lets a trainer finish writing a folder


@dataclass
class ChildResult:
    rc: int | None          # None when it was ended at its time box
    seconds: float
    tail: list[str]         # its last output lines, for the job summary

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def timed_out(self) -> bool:
        return self.rc is None


def dllm_command(*args: str) -> list[str]:
    """The `dllm-lsp` command line as this interpreter runs it (no console script needed)."""
    return [sys.executable, "-m", "dllm_lsp", *args]


def run_child(label: str, cmd: list[str], timeout_s: float, log: TextIO, env: dict[str, str],
              cwd: Path | None = None, stdin_path: Path | None = None, echo: bool = True,
              stop_early: Callable[[], bool] = lambda: False,
              started_as: Callable[[int], None] = lambda pid: None) -> ChildResult:
    """Run `cmd` in its own session for at most `timeout_s`, ended sooner when `stop_early()`
    turns true (checked every second: the job told to pack now). `started_as(pid)` is told its
    pid, its session's and process group's too: if the job dies, nothing else ends the child."""
    started = time.monotonic()
    log.write(f"[{label}] $ {' '.join(cmd)}  (box {timeout_s:.0f} s)\n")
    log.flush()
    stdin = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
    # A new session: the time box can end the child and everything it started (DataLoader workers).
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=stdin, env=env,
                            cwd=cwd, start_new_session=True, text=True, errors="replace", bufsize=1)
    started_as(proc.pid)
    tail: list[str] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            del tail[:-20]
            log.write(f"[{label}] {line}\n")
            log.flush()
            if echo:
                print(f"[{label}] {line}", flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    rc: int | None = None
    early = False
    deadline = started + max(timeout_s, 1.0)
    while True:
        try:
            rc = proc.wait(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            early = stop_early()
            if early or time.monotonic() >= deadline:
                stop(proc)
                break
    reader.join(timeout=5)
    if stdin_path:
        stdin.close()
    seconds = time.monotonic() - started
    state = f"exit {rc}" if rc is not None else "ended: the job was told to pack" if early else "ended at its time box"
    log.write(f"[{label}] {state} after {seconds:.1f} s\n")
    log.flush()
    return ChildResult(rc, seconds, tail)


def stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def is_dllm_process(pid: int) -> bool:
    """Whether `pid` is a live dllm-lsp process: not gone, not a zombie, not a pid the system gave
    to another program since (its command line names dllm_lsp)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True     # alive, another user's: not to be taken for gone
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
        return b"dllm_lsp" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return True     # no /proc to ask: it answers signals, that is all there is to know


def end_group(pgid: int, grace_s: float = GRACE_S) -> bool:
    """End a process group this process did not start (a dead job's running step, which would
    otherwise run on, unboxed): SIGTERM, then SIGKILL after `grace_s`, as a time box does (a
    trainer saves its folder on SIGTERM). True when the group is gone."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        until = time.monotonic() + wait
        while time.monotonic() < until:
            if not is_dllm_process(pgid):
                return True
            time.sleep(0.2)
    return not is_dllm_process(pgid)

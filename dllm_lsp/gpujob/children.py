"""Running one phase step as a child process: output streamed into the job log, a hard time box."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

GRACE_S = 15.0   # after SIGTERM, before SIGKILL: lets a trainer finish writing a folder
PROC = Path("/proc")


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
    # Every process of the step's tree seen while it runs: one that leaves the group (setsid, a
    # DataLoader worker's own group) and is orphaned loses its parent link, and is found by this.
    seen: dict[int, int] = {}
    deadline = started + max(timeout_s, 1.0)
    while True:
        try:
            rc = proc.wait(timeout=max(0.0, min(1.0, deadline - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            seen.update(tree_of(proc.pid))
            early = stop_early()
            if early or time.monotonic() >= deadline:
                break
    # Ended at its box, or exited leaving processes of its tree behind (a benchmark's servers, which
    # held the GPU into the next step): nothing of the step outlives it.
    ended = end_tree(proc.pid, seen, leader=proc) if rc is None or alive_of(seen, proc.pid) else None
    reader.join(timeout=5)
    if stdin_path:
        stdin.close()
    seconds = time.monotonic() - started
    state = f"exit {rc}" if rc is not None else "ended: the job was told to pack" if early else "ended at its time box"
    log.write(f"[{label}] {state} after {seconds:.1f} s{ended.said(rc is None) if ended else ''}\n")
    log.flush()
    return ChildResult(rc, seconds, tail)


def process_table() -> dict[int, tuple[int, int, str, int]]:
    """pid -> (parent pid, process group, state letter, start time in clock ticks), from /proc
    (empty where there is none: then only the process group can be signalled)."""
    table = {}
    for stat in PROC.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            table[int(stat.parent.name)] = (int(fields[1]), int(fields[2]), fields[0], int(fields[19]))
        except (OSError, IndexError, ValueError):
            continue    # gone while the table was read
    return table


def tree_of(pgid: int, table: dict | None = None) -> dict[int, int]:
    """The live processes of a step started in its own session (pid = process group = `pgid`):
    its group's members and every descendant by parent links, wherever their group, as pid ->
    start time (which tells a process from a later one given the same pid). Zombies are gone:
    they hold nothing but their exit status."""
    table = process_table() if table is None else table
    found = {pid for pid, (_, group, state, _) in table.items() if group == pgid and state != "Z"}
    if pgid in table and table[pgid][2] != "Z":
        found.add(pgid)
    frontier = set(found)
    while frontier:
        frontier = {pid for pid, (parent, _, state, _) in table.items()
                    if parent in frontier and pid not in found and state != "Z"}
        found |= frontier
    return {pid: table[pid][3] for pid in found}


def alive_of(seen: dict[int, int], pgid: int, table: dict | None = None) -> dict[int, int]:
    """Those of `seen` still running as the same processes, with the group's and the tree's live members."""
    table = process_table() if table is None else table
    left = {pid: start for pid, start in seen.items()
            if pid in table and table[pid][3] == start and table[pid][2] != "Z"}
    return {**left, **tree_of(pgid, table)}


@dataclass
class Ended:
    """How a step's tree was ended (end_tree)."""
    others: list[int]       # its processes besides the leader when the ending began
    killed: list[int]       # still there after the grace: SIGKILL
    left: list[int]         # still there after that (in the kernel's hands: uninterruptible)
    names: dict[int, str] = field(default_factory=dict)   # of `others`, for the log: what was left

    @property
    def gone(self) -> bool:
        return not self.left

    def said(self, boxed: bool) -> str:
        """The log line's end: what ending the tree took, beyond a time box's SIGTERM to the step."""
        parts = []
        if self.others and not boxed:
            named = ", ".join(f"{pid} {self.names.get(pid, '?')}" for pid in self.others)
            parts.append(f"ended {len(self.others)} process(es) it left running ({named})")
        if self.killed:
            parts.append(f"SIGKILL after {GRACE_S:.0f} s for {pids(self.killed)}")
        if self.left:
            parts.append(f"STILL RUNNING: {pids(self.left)}")
        return "; " + "; ".join(parts) if parts else ""


def pids(found: list[int]) -> str:
    return ", ".join(str(pid) for pid in sorted(found))


def end_tree(pgid: int, seen: dict[int, int] | None = None, grace_s: float = GRACE_S,
             leader: subprocess.Popen | None = None) -> Ended:
    """End a step's whole process tree, `pgid` being its session's first process (its Popen
    `leader` when it is this process's child, which is then reaped). SIGTERM to its group (a
    trainer saves its folder and shuts down its data workers, which left the group on purpose),
    and to each process of the tree outside the group once the leader is gone (nobody else will
    end them); whatever is still there after `grace_s` gets SIGKILL: every process of the tree
    (`seen` while it ran, the group, the descendants), not only the leader. A benchmark's servers
    outlived a time box that waited for the benchmark alone, and held the GPU into the next step."""
    seen = {**(seen or {}), **tree_of(pgid)}

    def still_there() -> dict[int, int]:
        left = alive_of(seen, pgid)
        if leader is not None:                # poll() reaps it once it has exited (no zombie to count)
            if leader.poll() is None:
                left.setdefault(pgid, -1)
            else:
                left.pop(pgid, None)
        elif not PROC.is_dir() and is_dllm_process(pgid):   # no /proc to list the tree: the leader at least
            left.setdefault(pgid, -1)
        return left

    left = still_there()
    others = sorted(pid for pid in left if pid != pgid)
    names = {pid: name_of(pid) for pid in others}
    signal_group(pgid, signal.SIGTERM)
    terminated: set[int] = set()
    until = time.monotonic() + grace_s
    while left:
        if pgid not in left:
            # The leader is gone: the rest of its tree outside its group would run on, orphaned.
            table = process_table()
            for pid, start in left.items():
                if pid not in terminated and table.get(pid, (0, 0, "", -1))[1] != pgid:
                    signal_process(pid, start, signal.SIGTERM)
                    terminated.add(pid)
        if time.monotonic() >= until:
            break
        time.sleep(0.2)
        left = still_there()
        seen.update({pid: start for pid, start in left.items() if start >= 0})
    killed = sorted(left)
    if killed:
        signal_group(pgid, signal.SIGKILL)
        for pid, start in left.items():
            signal_process(pid, start, signal.SIGKILL)
        until = time.monotonic() + 10.0
        while left and time.monotonic() < until:
            time.sleep(0.2)
            left = still_there()
    return Ended(others, killed, sorted(left), names)


def name_of(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return "?"


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def signal_process(pid: int, start: int, sig: int) -> None:
    """Signal `pid` if it is still the process that started at `start` (not a later one given its pid)."""
    if start < 0 or process_table().get(pid, (0, 0, "", -1))[3] != start:
        return
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


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
    """End a step this process did not start (a dead job's running step, which would otherwise run
    on, unboxed), its whole tree as a time box does (end_tree). True when nothing of it is left."""
    return end_tree(pgid, grace_s=grace_s).gone

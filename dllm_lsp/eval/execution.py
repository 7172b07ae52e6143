"""Run benchmark programs, each in its own subprocess, temporary folder and time limit."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
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

# Runs in the child before the program: caps its memory and file sizes (preexec_fn is unsafe
# with threads), runs it, and says it ran to its end.
BOOTSTRAP = (
    "import os, sys, runpy\n"
    "try:\n"
    "    import resource\n"
    f"    resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))\n"
    f"    resource.setrlimit(resource.RLIMIT_FSIZE, ({FILE_SIZE_LIMIT}, {FILE_SIZE_LIMIT}))\n"
    "except (ImportError, ValueError, OSError):\n"
    "    pass\n"
    "runpy.run_path(sys.argv[1], run_name='__main__')\n"
    "sys.stdout.flush()\n"
    f"os.write(1, b'\\n{RAN_TO_END}\\n')\n"
)


def run_program(program: str, timeout: float) -> Outcome:
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
                [sys.executable, "-I", "-c", BOOTSTRAP, path], cwd=work, stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, start_new_session=True,
            )
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            finally:
                # The whole group, whatever the outcome: a program that passed may have left children.
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
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
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda p: run_program(p, timeout), programs))

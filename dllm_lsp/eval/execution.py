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


# Runs in the child before the program: caps its memory (preexec_fn is unsafe with threads).
BOOTSTRAP = (
    "import sys, runpy\n"
    "try:\n"
    "    import resource\n"
    f"    resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))\n"
    "except (ImportError, ValueError, OSError):\n"
    "    pass\n"
    "runpy.run_path(sys.argv[1], run_name='__main__')\n"
)


def run_program(program: str, timeout: float) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="dllm-eval-") as tmp:
        path = os.path.join(tmp, "program.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(program)
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", BOOTSTRAP, path], cwd=tmp, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)   # the whole group: the program may have spawned children
            proc.communicate()
            return Outcome(False, "timeout")
    if proc.returncode == 0:
        return Outcome(True, "passed")
    lines = err.decode("utf-8", "replace").strip().splitlines()
    return Outcome(False, "failed: " + (lines[-1][:200] if lines else f"exit {proc.returncode}"))


def run_programs(programs: list[str], timeout: float, workers: int) -> list[Outcome]:
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(lambda p: run_program(p, timeout), programs))

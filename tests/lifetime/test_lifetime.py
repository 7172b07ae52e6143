"""No process of this project outlives what it serves (dllm_lsp/lifetime.py): a benchmark's
server ends with the benchmark, SIGKILL included, and SIGTERM runs a benchmark's cleanup."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dllm_lsp.lifetime import cleanup_on_termination, process_alive

pytestmark = pytest.mark.timeout(180)


def children_of(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_sigterm_runs_the_cleanup_and_exits_with_its_status():
    cleaned = []
    with pytest.raises(SystemExit) as stopped:
        with cleanup_on_termination():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                cleaned.append(True)
    assert stopped.value.code == 128 + signal.SIGTERM and cleaned == [True]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL   # put back as it was


def test_a_killed_typing_bench_takes_its_server_with_it(tiny_model_dir, tmp_path):
    """The bench's `serve --tcp` child kept listening, its model loaded, after a SIGKILL of the
    bench (an OOM kill, a driver's timeout that kills only its child)."""
    bench = subprocess.Popen([sys.executable, "-m", "dllm_lsp", "bench", "typing", "--clients", "1",
                              "--keystrokes", "400", "--model", str(tiny_model_dir), "--device", "cpu",
                              "--out", str(tmp_path / "t.json")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    servers: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while not (servers := children_of(bench.pid)):
            assert bench.poll() is None and time.monotonic() < deadline, "the bench started no server"
            time.sleep(0.2)
        time.sleep(3)                     # the server is up and the replay under way
        bench.kill()
        bench.wait()
        deadline = time.monotonic() + 30
        while any(process_alive(pid) for pid in servers):
            assert time.monotonic() < deadline, f"the bench's server {servers} outlived it"
            time.sleep(0.2)
    finally:
        bench.kill()
        for pid in servers + children_of(bench.pid):
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_zombie_is_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while process_alive(child.pid):       # exited but not reaped: a zombie
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child.wait()

"""A GPU job step ends whole: when its time box ends it, or when it exits, nothing of its process
tree runs on (`bench typing`'s servers held the GPU past their step): processes of its group that
outlive its SIGTERM, ones that left its group, ones it left behind when it exited."""
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dllm_lsp.gpujob.children import dllm_command, end_group, run_child, tree_of

from .polling import wait_for

pytestmark = pytest.mark.timeout(300)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def kill_all(pids):
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


# A step whose tree outlives a SIGTERM to its group: a grandchild that ignores SIGTERM (a process
# busy in the driver, or one that handles it slowly) and one in a session of its own (setsid, as a
# DataLoader worker leaves the trainer's group). Each writes its pid so the test can look for it.
TREE = """
sh -c 'trap "" TERM; echo $$ > {d}/ignores; exec sleep 300' &
setsid sh -c 'echo $$ > {d}/own-session; exec sleep 300' &
sleep 300 & wait
"""


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")
def test_a_step_ended_at_its_box_takes_its_whole_tree(tmp_path):
    log = io.StringIO()
    pids = {}
    found = lambda: all((tmp_path / n).is_file() and (tmp_path / n).read_text().strip()
                        for n in ("ignores", "own-session"))
    result = run_child("bench/tree", ["sh", "-c", TREE.format(d=tmp_path)], 600, log, dict(os.environ),
                       stop_early=found, started_as=lambda pid: pids.update(leader=pid), echo=False)
    grandchildren = [int((tmp_path / n).read_text()) for n in ("ignores", "own-session")]
    try:
        assert result.rc is None
        # Gone when run_child returns: the job's next step starts only then.
        assert not [pid for pid in grandchildren if alive(pid)], (grandchildren, log.getvalue())
        assert not tree_of(pids["leader"])
        assert "SIGKILL after 15 s" in log.getvalue()   # the one ignoring SIGTERM needed it
    finally:
        kill_all(grandchildren)


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")
def test_what_a_step_leaves_running_when_it_exits_is_ended(tmp_path):
    log = io.StringIO()
    # The step exits only once a look at its tree (each second, just before stop_early) was taken
    # after both were started: one in a session of its own is then known only from that look (a
    # fixed `sleep 1` raced the first look on a loaded machine).
    script = (f"sleep 300 & echo $! > {tmp_path}/left; setsid sleep 300 & echo $! > {tmp_path}/left2; "
              f"while [ ! -e {tmp_path}/go ]; do sleep 0.1; done; exit 0")
    looks = {"count": 0, "started_at": None}

    def after_a_look() -> bool:
        looks["count"] += 1
        if looks["started_at"] is None:
            if (tmp_path / "left2").is_file() and (tmp_path / "left2").read_text().strip():
                looks["started_at"] = looks["count"]
        elif looks["count"] > looks["started_at"]:
            (tmp_path / "go").touch()
        return False

    result = run_child("bench/left", ["sh", "-c", script], 600, log, dict(os.environ), echo=False,
                       stop_early=after_a_look)
    left = [int((tmp_path / n).read_text()) for n in ("left", "left2")]
    try:
        assert result.rc == 0
        assert not [pid for pid in left if alive(pid)], log.getvalue()
        assert "ended 2 process(es) it left running" in log.getvalue()
    finally:
        kill_all(left)


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")
def test_a_dead_jobs_step_is_ended_whole_by_wait(tmp_path):
    """`gpujob wait`'s salvage ends the running step of a job that died: its whole tree too."""
    leader = subprocess.Popen(["sh", "-c", TREE.format(d=tmp_path)], start_new_session=True)
    grandchildren: list[int] = []
    try:
        wait_for(lambda: all((tmp_path / n).is_file() and (tmp_path / n).read_text().strip()
                             for n in ("ignores", "own-session")), 30)
        grandchildren = [int((tmp_path / n).read_text()) for n in ("ignores", "own-session")]
        assert end_group(leader.pid, grace_s=2.0) is True
        leader.wait(timeout=10)
        assert not [pid for pid in grandchildren if alive(pid)]
    finally:
        leader.kill()
        kill_all(grandchildren)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the server's end is checked through /proc")
def test_bench_typing_ended_at_its_box_leaves_no_server(tmp_path, tiny_model_dir):
    """The real step the GPU job boxes: `bench typing` told to stop mid-replay, its servers with it."""
    log = io.StringIO()
    pids: dict = {}
    servers: set[int] = set()

    def replay_under_way() -> bool:
        tree = tree_of(pids["leader"])
        servers.update(pid for pid in tree if " serve --tcp " in cmdline(pid))
        if servers and "since" not in pids:
            pids["since"] = time.monotonic()
        return "since" in pids and time.monotonic() - pids["since"] > 8   # the server up, clients typing

    cmd = dllm_command("bench", "typing", "--clients", "2", "--keystrokes", "400", "--model", str(tiny_model_dir),
                       "--device", "cpu", "--out", str(tmp_path / "typing.json"))
    result = run_child("bench/typing", cmd, 240, log, {**os.environ, "PYTHONUNBUFFERED": "1"},
                       stop_early=replay_under_way, started_as=lambda pid: pids.update(leader=pid), echo=False)
    try:
        assert servers, log.getvalue()
        assert result.rc is None and "ended: the job was told to pack" in log.getvalue()
        assert not [pid for pid in servers if alive(pid)] and not tree_of(pids["leader"])
    finally:
        kill_all(servers)

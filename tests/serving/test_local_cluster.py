"""A loopback Ray cluster (dllm_lsp/serving/local_cluster.py) ends with the process that started
it: a SIGKILLed `bench typing --ray-replicas` (an OOM kill) left its raylet, GCS and workers
running, holding memory and ports."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

# The bench's own way in: `with RayCluster(...)` on the main thread; the pid of `ray start`
# (the leader of the session every process of the cluster runs in) goes to a file, then it waits.
OWNER = """
import sys, time
from pathlib import Path
from dllm_lsp.serving.local_cluster import RayCluster
with RayCluster(Path(sys.argv[1]), cpus=1) as cluster:
    (Path(sys.argv[1]) / "head.pid").write_text(str(cluster.proc.pid))
    time.sleep(600)
"""


def session_members(sid: int) -> dict[int, str]:
    """The live (not zombie) processes of session `sid`, with their command lines."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:       # ended while being read
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found[int(stat.parent.name)] = command
    return found


def test_a_killed_owner_takes_its_cluster_with_it():
    if shutil.which("ray") is None and not os.environ.get("CI"):
        pytest.skip("Ray is not installed (pip install 'dllm-lsp[ray]')")
    # A short folder, as the bench's: Ray's socket paths inside it must fit in 107 bytes.
    tmp_path = Path(tempfile.mkdtemp(prefix="dllm-ray-"))
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    head = 0
    try:
        deadline = time.monotonic() + 180
        while not (tmp_path / "head.pid").exists():
            assert owner.poll() is None, f"the cluster did not start: {owner.stderr.read().decode()[-2000:]}"
            assert time.monotonic() < deadline, "the cluster did not start in time"
            time.sleep(0.5)
        head = int((tmp_path / "head.pid").read_text())
        # Ready (`wait_ready` returned) means the raylet registered with the GCS: both run.
        commands = " ".join(session_members(head).values())
        assert "raylet/raylet" in commands and "gcs/gcs_server" in commands, commands
        assert head in session_members(head)
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 60
        while left := session_members(head):
            assert time.monotonic() < deadline, f"the cluster outlived its owner: {left}"
            time.sleep(0.5)
    finally:
        owner.kill()
        owner.wait()
        if head and session_members(head):
            os.killpg(head, signal.SIGKILL)   # its processes share `ray start`'s process group
        shutil.rmtree(tmp_path, ignore_errors=True)

"""A loopback Ray cluster (dllm_lsp/serving/local_cluster.py) started from a worker thread lives as
long as its process: the kernel's signal on the parent's death follows the thread that started
the child, and a cluster started from a thread pool died with the pool's thread. And it is ready
when `wait_ready` returns: the GCS answered `ray status` seconds before the raylet registered, and
a deployment made in between failed or waited."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dllm_lsp.serving.local_cluster import RayCluster

from .test_local_cluster import session_members

pytestmark = pytest.mark.timeout(400)

# The GCS node table as it is, straight from the GCS: `ray.init` would wait for a raylet itself (60 s),
# so it could not tell whether one was there when `wait_ready` returned.
ALIVE_NODES = """
import json, sys
from ray._raylet import GcsClient
from ray.core.generated.gcs_pb2 import GcsNodeInfo
nodes = GcsClient(address=sys.argv[1]).get_all_node_info(timeout=30).values()
print(json.dumps([dict(node.resources_total) for node in nodes if node.state == GcsNodeInfo.GcsNodeState.ALIVE]))
"""

# A client's work: a driver connects and a task runs on a worker.
TASK = """
import sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(ray.get(ray.remote(num_cpus=1)(lambda x: 2 * x).remote(21)))
"""


def run_python(cluster: RayCluster, script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, cluster.address], env=cluster.env, capture_output=True,
                          text=True, timeout=120)


def run_task(cluster: RayCluster) -> tuple[str, str]:
    """TASK's output; a failure as soon as the cluster ends (a driver of a dead cluster waits)."""
    task = subprocess.Popen([sys.executable, "-c", TASK, cluster.address], env=cluster.env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                out, err = task.communicate(timeout=0.5)
                assert task.returncode == 0, err[-2000:]
                return out, err
            except subprocess.TimeoutExpired:
                assert cluster.proc.poll() is None, ("the cluster ended with the thread that started it: "
                                                     f"ray start exited with {cluster.proc.returncode}")
                assert time.monotonic() < deadline, "the task did not run"
    finally:
        if task.poll() is None:
            task.kill()
            task.communicate()


def test_a_cluster_started_on_a_passing_thread_is_ready_and_outlives_the_thread():
    if shutil.which("ray") is None and not os.environ.get("CI"):
        pytest.skip("Ray is not installed (pip install 'dllm-lsp[ray]')")
    # A short folder, as the bench's: Ray's socket paths inside it must fit in 107 bytes.
    tmp_path = Path(tempfile.mkdtemp(prefix="dllm-ray-"))
    cluster = RayCluster(tmp_path, cpus=1)
    seen = {}

    def start() -> None:
        cluster.__enter__()
        # Asked at once, on the starting thread: what `wait_ready` promised, not what came later.
        seen["nodes"] = run_python(cluster, ALIVE_NODES)
        seen["thread"] = threading.get_native_id()

    try:
        with ThreadPoolExecutor(1) as pool:   # leaving it ends its thread
            pool.submit(start).result()
        nodes = seen["nodes"]
        assert nodes.returncode == 0, nodes.stderr[-2000:]
        alive = json.loads(nodes.stdout.strip().splitlines()[-1])
        assert len(alive) == 1 and alive[0]["CPU"] == 1, alive
        # The thread has exited in the kernel (the signal on a parent thread's death is sent then).
        deadline = time.monotonic() + 30
        while Path(f"/proc/self/task/{seen['thread']}").exists():
            assert time.monotonic() < deadline, "the pool's thread did not end"
            time.sleep(0.1)
        out, err = run_task(cluster)
        assert out.split()[-1:] == ["42"], err[-2000:]
        assert cluster.proc.poll() is None, "the cluster ended with the thread that started it"
        commands = " ".join(session_members(cluster.proc.pid).values())
        assert "raylet/raylet" in commands and "gcs/gcs_server" in commands, commands
        # `stop` (SIGTERM to the watcher) ends every process of the cluster, without the SIGKILL fallback.
        cluster.stop()
        assert cluster.proc.returncode != -signal.SIGKILL, cluster.proc.returncode
        deadline = time.monotonic() + 60
        while left := session_members(cluster.proc.pid):
            assert time.monotonic() < deadline, f"the cluster outlived `stop`: {left}"
            time.sleep(0.5)
    finally:
        if cluster.proc is not None:
            cluster.stop()
            if session_members(cluster.proc.pid):
                os.killpg(cluster.proc.pid, signal.SIGKILL)
        shutil.rmtree(tmp_path, ignore_errors=True)

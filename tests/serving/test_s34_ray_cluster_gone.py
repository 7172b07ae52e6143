"""A Ray front that got no request while its cluster went and came back (a head restarted at the
same address, the deployment made again with another model) serves again on the same connection
and names the new model: it did not notice, said `loaded` with the old model throughout, and its
first request afterwards waited the whole 120 s timeout on the old cluster's session. A driver
holding a `RemoteEngine` says meanwhile that the cluster is gone (`unavailable`, what the front's
`dllm/status` is to report) and that it serves again once it is back."""
import asyncio
import json
import shutil
import subprocess
import sys
import threading

import pytest

from tests.server.lsp_harness import inline_params, open_doc, wait_loaded
from tests.serving import test_ray_serve
from tests.serving.test_ray_serve import TEXT, URI, deploy_tiny, start_front, stop_front

pytestmark = pytest.mark.timeout(900)
cluster = test_ray_serve.cluster      # the real loopback cluster, started and stopped for this module

# A driver as the front holds one: a RemoteEngine, whose state it prints whenever it changes (a
# JSON line), as the watcher it starts sees it. Nothing is sent to the deployment.
WATCHER = """
import json, sys, time
from dllm_lsp.serving.ray_serve import RemoteEngine
engine = RemoteEngine(sys.argv[1])
seen = None
while True:
    now = {"unavailable": engine.unavailable, "model": engine.denoiser.name}
    if now != seen:
        print(json.dumps(now), flush=True)
        seen = now
    time.sleep(0.2)
"""


class Watcher:
    """The WATCHER script's states, read on a thread as it prints them."""

    def __init__(self, cluster) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", WATCHER, cluster.address], env=cluster.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.states: list[dict] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                state = json.loads(line)
            except ValueError:
                continue            # anything else Ray prints on stdout
            if isinstance(state, dict):
                self.states.append(state)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


async def until(predicate, timeout: float) -> None:
    """Wait for `predicate()` (polled), failing after `timeout` seconds."""
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.5)
    await asyncio.wait_for(poll(), timeout)


async def test_a_front_without_requests_follows_its_cluster_away_and_back_to_another_model(
        cluster, tiny_model_dir, tmp_path):
    deploy_tiny(cluster, tiny_model_dir)
    client, _, status = await start_front(tmp_path, "--ray", cluster.address, env=cluster.env)
    watcher = Watcher(cluster)
    try:
        assert status["loaded"] and status["model"] == tiny_model_dir.name
        open_doc(client, URI, TEXT)
        assert await client.text_document_inline_completion_async(inline_params(URI, 1, 11)) is not None
        await until(lambda: watcher.states, 120)
        assert watcher.states[-1] == {"unavailable": None, "model": tiny_model_dir.name}, watcher.states

        address = cluster.address
        cluster.stop()                     # no request to the front from here until it is back
        # The watcher's check runs every 5 s (HEALTH_S).
        await until(lambda: watcher.states[-1]["unavailable"] is not None, 60)
        assert "the Ray cluster at" in watcher.states[-1]["unavailable"] and "is gone" in watcher.states[-1][
            "unavailable"], watcher.states
        # The front's own status says so too (it said loaded: true while the cluster was gone).
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            front = await wait_loaded(client, timeout=30)
            if not front["loaded"] and "is gone" in (front["error"] or ""):
                break
            assert asyncio.get_running_loop().time() < deadline, front
            await asyncio.sleep(0.5)
        cluster.restart()
        assert cluster.address == address
        other = shutil.copytree(tiny_model_dir, tmp_path / "other-model")
        done = cluster.dllm("ray", "deploy", "--address", cluster.address, "--model", str(other), "--device", "cpu",
                            "--replicas", "1", "--num-cpus", "0.5")
        assert done.returncode == 0, done.stderr[-3000:]
        cluster.deployed_tiny = False

        # 60 s: half the front's 120 s request timeout, which the request waited out on the old session.
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 60)
        assert answer is not None and answer.items
        status = await wait_loaded(client, timeout=30)
        assert status["model"] == "other-model" and status["device"] == "ray:cpu", status
        assert status["loaded"] and status["error"] is None, status
        await until(lambda: watcher.states[-1] == {"unavailable": None, "model": "other-model"}, 60)
    finally:
        watcher.stop()
        await stop_front(client)

"""A Ray deployment changed under a running front, on the same cluster (no restart): redeployed
with another model, a replica's process killed mid-request, a slow request cancelled.

- The front noticed nothing of a redeploy with another model until the deployment went away: it
  kept the old model's description (tokenizer, limits, the name in `dllm/status`), and requests
  planned with it went to the new model. Now its check every 5 s reads the newest replica's
  model from the application's board, and a replica refuses a request made for another model.
- A replica whose process is SIGKILLed mid-request: the request is sent again and answered (not
  left to the 120 s timeout); a cancelled request's denoise loop ends on the replica ("stopped")."""
import asyncio
import json
import shutil
import subprocess
import sys

import pytest

from tests.server.lsp_harness import inline_params, open_doc, wait_loaded
from tests.serving import test_ray_serve
from tests.serving.test_ray_serve import TEXT, URI, deploy_tiny, start_front, stop_front

pytestmark = pytest.mark.timeout(900)
cluster = test_ray_serve.cluster      # the real loopback cluster, started and stopped for this module

SLOW = """
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
# 256 one-token steps after a long context: seconds on the tiny model, long enough to act on.
slow = InfillRequest.single("value = 1\\n" * 300 + "def area(w, h):\\n    ", "\\n", 256)
slow_settings = DecodeSettings(steps=256, threshold=1.0, max_per_step=1, slot_start_tokens=0)
"""

# A driver holding a RemoteEngine that never checks on its own (health every hour): it reads one
# line ("go") from stdin, then sends one request planned with the model it read at its start.
STALE = SLOW + """
import json, sys
from dllm_lsp.serving.ray_serve import RemoteEngine
engine = RemoteEngine(sys.argv[1], health_s=3600)
print(json.dumps({"ready": engine.denoiser.name}), flush=True)
sys.stdin.readline()
said = {"planned_with": engine.denoiser.name}
try:
    engine.infill(InfillRequest.single("def area(w, h):\\n    return ", "\\n", 8))
    said["first"] = "served"
except Exception as exc:
    said["first"] = f"{type(exc).__name__}: {exc}"
said["now_holds"] = engine.denoiser.name
engine.infill(InfillRequest.single("def area(w, h):\\n    return ", "\\n", 8))
said["second"] = "served"
print(json.dumps(said), flush=True)
"""

# A driver that cancels a slow request, then kills the process of the replica serving another
# one; prints what it saw as one JSON line.
CRASH = SLOW + """
import json, os, signal, sys, threading, time
from dllm_lsp.engine.engine import Cancelled, CancelToken
from dllm_lsp.serving.ray_serve import RemoteEngine, replica_status
engine = RemoteEngine(sys.argv[1], sys.argv[2])
said = {}

def rows():
    return {rid: row for rid, row in replica_status(sys.argv[1], sys.argv[2])["replicas"].items() if row["alive"]}

def busy():
    while True:
        for row in rows().values():
            if row["requests"] - row["completed"] - row["cancelled"] - row["failed"] > 0:
                return row
        time.sleep(0.05)

cancel = CancelToken()
outcome = {}
def run(token):
    try:
        outcome["result"] = engine.infill(slow, slow_settings, token).candidates[0]
    except BaseException as exc:
        outcome["result"] = f"{type(exc).__name__}: {exc}"

worker = threading.Thread(target=run, args=(cancel,))
worker.start()
busy()
cancel.cancel()
worker.join()
said["cancelled"] = outcome["result"]
# The replica's loop has ended, not only heard the cancel: "stopped" is counted when it has.
waited = time.monotonic() + 120     # a bound on the wait, not a timing: the loop ends in a step or two
while not sum(row.get("stopped", 0) for row in rows().values()) and time.monotonic() < waited:
    time.sleep(0.2)
said["stopped"] = sum(row.get("stopped", 0) for row in rows().values())

outcome.clear()
worker = threading.Thread(target=run, args=(None,))
worker.start()
victim = busy()
os.kill(victim["pid"], signal.SIGKILL)
worker.join()
said["killed"] = victim["replica"]
said["after_kill"] = outcome["result"]
print(json.dumps(said), flush=True)
"""


async def test_a_redeploy_with_another_model_is_noticed_and_old_plans_are_refused(cluster, tiny_model_dir, tmp_path):
    deploy_tiny(cluster, tiny_model_dir)
    client, _, status = await start_front(tmp_path, "--ray", cluster.address, env=cluster.env)
    stale = subprocess.Popen([sys.executable, "-c", STALE, cluster.address], env=cluster.env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert status["loaded"] and status["model"] == tiny_model_dir.name
        open_doc(client, URI, TEXT)
        assert await client.text_document_inline_completion_async(inline_params(URI, 1, 11)) is not None
        ready = await asyncio.wait_for(asyncio.to_thread(stale.stdout.readline), 180)
        assert json.loads(ready) == {"ready": tiny_model_dir.name}

        # The same cluster, the same application: another model (a copy under another name).
        other = shutil.copytree(tiny_model_dir, tmp_path / "other-model")
        done = cluster.dllm("ray", "deploy", "--address", cluster.address, "--model", str(other), "--device", "cpu",
                            "--replicas", "1", "--num-cpus", "0.5")
        assert done.returncode == 0, done.stderr[-3000:]
        cluster.deployed_tiny = False

        # A request planned with the old model's description is refused by the new model's
        # replica, saying so; the engine then holds the new model and serves the next request.
        stale.stdin.write("go\n")
        stale.stdin.flush()
        said = json.loads(await asyncio.wait_for(asyncio.to_thread(stale.stdout.readline), 180))
        assert said["planned_with"] == tiny_model_dir.name
        assert said["first"].startswith("RemoteUnavailable") and "now serves other-model" in said["first"], said
        assert said["now_holds"] == "other-model" and said["second"] == "served", said

        # The front, sent nothing meanwhile, names the new model by itself (its check every 5 s).
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            status = await wait_loaded(client, timeout=30)
            if status["model"] == "other-model":
                break
            assert asyncio.get_running_loop().time() < deadline, status
            await asyncio.sleep(0.5)
        assert status["loaded"] and status["error"] is None and status["device"] == "ray:cpu", status
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 120)
        assert answer is not None and answer.items
    finally:
        stale.kill()
        stale.wait(timeout=30)
        await stop_front(client)


def test_a_cancelled_request_stops_on_the_replica_and_a_killed_replica_loses_no_request(cluster, tiny_model_dir):
    # An application of its own, one replica: the request sent again waits for its replacement.
    app = "crash"
    done = cluster.dllm("ray", "deploy", "--address", cluster.address, "--app", app, "--model", str(tiny_model_dir),
                        "--device", "cpu", "--replicas", "1", "--num-cpus", "0.5")
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([sys.executable, "-c", CRASH, cluster.address, app], env=cluster.env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["cancelled"].startswith("Cancelled"), said
    assert said["stopped"] >= 1
    # Sent again after the replica's process died, and answered (a list of slot texts), not an
    # error and not the 120 s "no answer".
    assert isinstance(said["after_kill"], list) and len(said["after_kill"]) == 1, said
    status = cluster.dllm("ray", "status", "--address", cluster.address, "--app", app)
    assert status.returncode == 0, status.stderr[-3000:]
    rows = json.loads(status.stdout)["replicas"]
    assert rows[said["killed"]]["alive"] is False and any(row["alive"] for row in rows.values())

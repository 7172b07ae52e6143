"""The Ray Serve scale-out on this machine: a real Ray cluster on loopback (started and stopped
here), two replicas of a tiny model deployed with `dllm-lsp ray deploy`, and the real LSP front
(`dllm-lsp serve --stdio --ray ADDRESS`) in front of them: completions equal a local server's,
streaming, a cancel that reaches the replica, a replica killed under load losing no request,
and a clear error once the deployment is gone."""
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from lsprotocol import types

from tests.server.lsp_harness import (
    inline_params,
    make_client,
    open_doc,
    raw_inline_params,
    wait_loaded,
    wait_until,
)
from dllm_lsp.net import free_port
from dllm_lsp.serving.local_cluster import RAY_DEFAULT_PORTS, RayCluster

pytestmark = pytest.mark.timeout(600)
URI = "file:///ray/area.py"
TEXT = "def area(width, height):\n    return \n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if shutil.which("ray") is None and not os.environ.get("CI"):
        pytest.skip("Ray is not installed (pip install 'dllm-lsp[ray]')")
    with RayCluster(tmp_path_factory.mktemp("ray")) as running:
        yield running


def deploy_tiny(cluster, tiny_model_dir) -> None:
    """Deploy the tiny model once per cluster (the first test does it before any deployment)."""
    if getattr(cluster, "deployed_tiny", False):
        return
    done = cluster.dllm("ray", "deploy", "--address", cluster.address, "--model", str(tiny_model_dir), "--device",
                        "cpu", "--replicas", "2", "--num-cpus", "0.5")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout.strip().splitlines()[-1])
    assert info["name"] == tiny_model_dir.name and info["family"] == "embedded"
    cluster.deployed_tiny = True


@pytest.fixture(scope="module")
def deployed(cluster, tiny_model_dir):
    deploy_tiny(cluster, tiny_model_dir)
    return cluster


async def start_front(tmp_path, *extra: str, options: dict | None = None, env: dict | None = None):
    client, seen = make_client()
    await client.start_io(sys.executable, "-m", "dllm_lsp", "serve", "--stdio", "--log-file",
                          str(tmp_path / f"front{len(extra)}.log"), *extra, env=env)
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities(),
                                                         initialization_options=options or {}))
    client.initialized(types.InitializedParams())
    status = await wait_loaded(client, timeout=120)
    return client, seen, status


async def stop_front(client) -> None:
    try:
        await asyncio.wait_for(client.shutdown_async(None), timeout=10)
        client.exit(None)
    finally:
        await asyncio.wait_for(client.stop(), timeout=10)


def replica_counts(cluster) -> dict:
    done = cluster.dllm("ray", "status", "--address", cluster.address)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["replicas"]


def one_line_error(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith("dllm-lsp ray: error:"), done.stderr[-3000:]
    return lines[0]


async def test_an_editor_connected_before_the_deployment_is_served_once_it_is_up(cluster, tiny_model_dir, tmp_path):
    # Runs first, on a cluster where Serve never ran.
    assert "nothing to delete" in one_line_error(cluster.dllm("ray", "delete", "--address", cluster.address))
    client, _, status = await start_front(tmp_path, "--ray", cluster.address, env=cluster.env)
    try:
        # Why, and what to do: "no Serve instance runs" or, since the front first joins the
        # cluster and reads its id (serve.status() answers empty there), "no 'dllm-lsp' deployment
        # serves"; either names `dllm-lsp ray deploy`.
        assert not status["loaded"] and ("no Serve instance" in status["error"]
                                         or "deployment serves" in status["error"]), status
        assert "dllm-lsp ray deploy --address" in status["error"], status
        deploy_tiny(cluster, tiny_model_dir)
        await asyncio.sleep(5)      # the front asks again 5 s after its last try
        open_doc(client, URI, TEXT)
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 120)
        assert answer is not None and answer.items      # the same connection, not a new one
        # Whatever model its options name, every client is served by the one deployment: three
        # names used to take three of the --max-models (2) slots, and the third was refused.
        for i in range(3):
            folder = shutil.copytree(tiny_model_dir, tmp_path / f"named{i}")
            client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
                settings={"dllm": {"model": str(folder)}}))
            again = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 120)
            assert again is not None and again.items
        status = await wait_loaded(client)
        assert status["loaded"] and status["error"] is None and status["device"] == "ray:cpu"
    finally:
        await stop_front(client)


def test_deploy_refuses_at_once_what_would_never_serve(cluster, tmp_path):
    missing = one_line_error(cluster.dllm("ray", "deploy", "--address", cluster.address,
                                          "--model", str(tmp_path / "no-such-model"), timeout=120))
    assert "no-such-model" in missing and "every node" in missing
    # Serve used to wait for such replicas for ever, printing nothing.
    for extra, expected in ((["--num-cpus", "64"], "64 CPU(s)"), (["--device", "cuda"], "1 GPU(s)")):
        error = one_line_error(cluster.dllm("ray", "deploy", "--address", cluster.address, "--app", "never",
                                            *extra, timeout=120))
        assert "no node of the cluster" in error and expected in error


def test_a_deployment_whose_replicas_fail_says_why_and_status_says_so_at_once(deployed, tiny_model_dir, tmp_path):
    broken = shutil.copytree(tiny_model_dir, tmp_path / "broken")
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    error = one_line_error(deployed.dllm("ray", "deploy", "--address", deployed.address, "--app", "broken",
                                         "--model", str(broken), "--num-cpus", "0.25", timeout=300))
    assert "deploying 'broken' failed" in error and "broken" in error
    started = time.monotonic()
    status = one_line_error(deployed.dllm("ray", "status", "--address", deployed.address, "--app", "broken"))
    assert "DEPLOY_FAILED" in status and time.monotonic() - started < 60   # it waited 120 s for an answer
    assert deployed.dllm("ray", "delete", "--address", deployed.address, "--app", "broken").returncode == 0


def test_an_error_a_replica_raises_reaches_the_front_as_its_own_line(cluster):
    # The front answered Ray's whole remote traceback (36 lines, colour codes) to the editor.
    script = (
        "import ray\n"
        "from dllm_lsp.serving.ray_serve import connect, replica_error\n"
        f"connect({cluster.address!r})\n"
        "@ray.remote(num_cpus=0)\n"
        "def refuse():\n"
        "    raise ValueError('slots of 256 tokens leave no room for the context')\n"
        "try:\n"
        "    ray.get(refuse.remote())\n"
        "except ray.exceptions.RayTaskError as exc:\n"
        "    error = replica_error(exc)\n"
        "    print(repr(type(error).__name__ + ': ' + str(error)))\n")
    done = subprocess.run([sys.executable, "-c", script], env=cluster.env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == repr("ValueError: slots of 256 tokens leave no room for the context")


async def test_completions_through_the_replicas_equal_a_local_server(deployed, tiny_model_dir, tmp_path):
    remote, _, status = await start_front(tmp_path, "--ray", deployed.address, env=deployed.env)
    local, _, _ = await start_front(tmp_path, options={"model": str(tiny_model_dir), "device": "cpu"})
    try:
        assert status["loaded"] and status["device"] == "ray:cpu"
        answers = []
        for client in (remote, local):
            open_doc(client, URI, TEXT)
            answers.append(await client.text_document_inline_completion_async(inline_params(URI, 1, 11)))
        assert answers[0].items and answers[0].items[0].insert_text == answers[1].items[0].insert_text
        assert answers[0].items[0].range == answers[1].items[0].range
    finally:
        await stop_front(remote)
        await stop_front(local)


async def test_streaming_and_a_cancel_that_reaches_the_replica(deployed, tmp_path):
    client, seen, _ = await start_front(tmp_path, "--ray", deployed.address, env=deployed.env,
                                        options={"steps": 4, "streamIntervalMs": 0})
    try:
        open_doc(client, URI, TEXT)
        params = {**raw_inline_params(URI, 1, 11), "partialResultToken": "ray-stream"}
        result = await asyncio.wait_for(asyncio.wrap_future(
            client.protocol.send_request("dllm/inlineCompletion", params)), timeout=60)
        reports = [p for p in seen.progress if p.token == "ray-stream"]
        assert reports, "no step was streamed from the replica"
        assert result is not None

        before = sum(r["cancelled"] for r in replica_counts(deployed).values())
        long_text = "value = 1\n" * 300 + "def area(width, height):\n    \n"
        open_doc(client, "file:///ray/long.py", long_text)
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"dllm": {"steps": 256, "threshold": 1.0, "maxSpanTokens": 256}}))
        future = client.protocol.send_request(
            types.TEXT_DOCUMENT_INLINE_COMPLETION, inline_params("file:///ray/long.py", 301, 4), msg_id="ray-slow")
        await asyncio.sleep(0.3)
        client.protocol.notify("$/cancelRequest", types.CancelParams(id="ray-slow"))
        with pytest.raises(Exception) as caught:
            await asyncio.wait_for(asyncio.wrap_future(future), timeout=60)
        assert getattr(caught.value, "code", None) == -32800
        await wait_until(lambda: sum(r["cancelled"] for r in replica_counts(deployed).values()) > before, timeout=60,
                         interval=0.5)
    finally:
        await stop_front(client)


def kill_replica(cluster) -> str:
    """Kill one replica actor of the deployment (as a node failure would); returns its name."""
    script = (
        "import ray\n"
        f"ray.init(address={cluster.address!r}, logging_level='ERROR', log_to_driver=False)\n"
        "names = sorted(a['name'] for a in ray.util.list_named_actors(all_namespaces=True)\n"
        "               if 'dllm-lsp#DenoiserReplica' in a['name'])\n"
        "ray.kill(ray.get_actor(names[0], namespace='serve'), no_restart=True)\n"
        "print(names[0])\n")
    done = subprocess.run([sys.executable, "-c", script], env=cluster.env, capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return done.stdout.strip()


async def test_a_replica_killed_under_load_loses_no_request(deployed, tmp_path):
    client, _, _ = await start_front(tmp_path, "--ray", deployed.address, env=deployed.env,
                                     options={"steps": 16, "threshold": 1.0})
    try:
        uris = [f"file:///ray/kill{i}.py" for i in range(8)]
        for uri in uris:
            open_doc(client, uri, "value = 2\n" * 100 + TEXT)
        pending = [client.text_document_inline_completion_async(inline_params(uri, 101, 11)) for uri in uris]
        killer = asyncio.create_task(asyncio.to_thread(kill_replica, deployed))
        answers = await asyncio.wait_for(asyncio.gather(*pending), timeout=120)
        killed = await killer
        assert killed
        assert all(a is not None for a in answers)            # every request answered
        again = await client.text_document_inline_completion_async(inline_params(uris[0], 101, 11))
        assert again is not None
        # `ray status` keeps the dead replica's last counters and says it is gone
        rows = replica_counts(deployed)
        dead = killed.rsplit("#", 1)[-1]
        assert dead in rows and rows[dead]["alive"] is False and rows[dead]["requests"] > 0
        assert any(row["alive"] for row in rows.values())
    finally:
        await stop_front(client)


async def test_no_deployment_left_is_a_clear_error(deployed, tmp_path):
    client, _, _ = await start_front(tmp_path, "--ray", deployed.address, env=deployed.env)
    try:
        open_doc(client, URI, TEXT)
        assert await client.text_document_inline_completion_async(inline_params(URI, 1, 11)) is not None
        assert deployed.dllm("ray", "delete", "--address", deployed.address).returncode == 0
        with pytest.raises(Exception) as caught:
            await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 180)
        assert getattr(caught.value, "code", None) == -32803 and "dllm-lsp" in str(caught.value)
    finally:
        await stop_front(client)
    fresh, _, status = await start_front(tmp_path, "--ray", deployed.address, env=deployed.env)
    try:
        assert not status["loaded"] and "no 'dllm-lsp' deployment serves" in status["error"]
    finally:
        await stop_front(fresh)
    done = deployed.dllm("ray", "status", "--address", deployed.address)
    assert done.returncode == 1 and "dllm-lsp ray deploy" in done.stderr


def test_a_client_with_the_wrong_token_is_refused_clearly(cluster, tmp_path):
    """The loopback cluster runs with Ray's token authentication on: a process holding another
    token is refused, and the CLI's last line says which setting to give it (no traceback)."""
    wrong = tmp_path / "wrong-token"
    wrong.write_text("0" * 64)
    env = {**cluster.env, "RAY_AUTH_TOKEN_PATH": str(wrong)}
    done = subprocess.run([sys.executable, "-m", "dllm_lsp", "ray", "status", "--address", cluster.address],
                          env=env, capture_output=True, text=True, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and last.startswith("dllm-lsp ray: error:") and "RAY_AUTH_TOKEN_PATH" in last, \
        done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_an_unreachable_cluster_is_one_line_at_once(tmp_path):
    done = subprocess.run([sys.executable, "-m", "dllm_lsp", "ray", "status", "--address", f"127.0.0.1:{free_port()}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "cannot reach the Ray cluster" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_without_ray_installed_the_cli_says_what_to_install():
    script = ("import sys; sys.modules['ray'] = None\n"       # as if the extra were not installed
              "from dllm_lsp.cli import main\n"
              "sys.exit(main(['ray', 'status', '--address', '127.0.0.1:1']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and 'pip install "dllm-lsp[ray]"' in done.stderr
    assert "Traceback" not in done.stderr


def test_the_clusters_ports_avoid_the_ones_ray_takes_by_default(tmp_path):
    """A GCS port drawn as 52365 (the dashboard agent's default) once kept a head from starting:
    the ports drawn are free, distinct and none of Ray's defaults, and the agent is told its own."""
    first = free_port(RAY_DEFAULT_PORTS)
    assert first not in RAY_DEFAULT_PORTS and free_port(RAY_DEFAULT_PORTS | {first}) != first
    cluster = RayCluster(tmp_path)
    assert cluster.port != cluster.agent_port
    assert not {cluster.port, cluster.agent_port} & RAY_DEFAULT_PORTS
    assert cluster.address == f"127.0.0.1:{cluster.port}"


def test_status_answers_while_the_replicas_are_busy(deployed, tiny_model_dir):
    """`ray status` asked the replicas through Serve's routing, in the same queue as the infills:
    with the replicas busy it waited behind every queued request. Forty slow requests queued on a
    replica that holds one at a time: status answers while most of them still wait."""
    app = "busy"
    done = deployed.dllm("ray", "deploy", "--address", deployed.address, "--app", app, "--model",
                         str(tiny_model_dir), "--device", "cpu", "--num-cpus", "0.25", "--max-ongoing", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    script = (
        "import json, subprocess, sys\n"
        "from ray import serve\n"
        "from dllm_lsp.engine.types import CacheSettings, DecodeSettings, InfillRequest\n"
        "from dllm_lsp.serving.ray_serve import connect, replica_status\n"
        f"connect({deployed.address!r})\n"
        f"handle = serve.get_deployment_handle('DenoiserReplica', app_name={app!r})\n"
        "request = InfillRequest.single('value = 1\\n' * 300 + 'def area(w, h):\\n    ', '\\n', 64)\n"
        "settings = DecodeSettings(steps=64, threshold=1.0, max_per_step=1, slot_start_tokens=0)\n"
        "pending = [handle.infill.remote(request, settings, None, CacheSettings()) for _ in range(40)]\n"
        "status = subprocess.run([sys.executable, '-m', 'dllm_lsp', 'ray', 'status', '--address', "
        f"{deployed.address!r}, '--app', {app!r}], capture_output=True, text=True, timeout=120)\n"
        f"again = [replica_status({deployed.address!r}, {app!r}) for _ in range(3)]\n"
        "for response in pending:\n"
        "    response.cancel()\n"
        "print(json.dumps({'rc': status.returncode, 'out': status.stdout, 'err': status.stderr[-2000:], "
        "'again': again}))\n")
    try:
        ran = subprocess.run([sys.executable, "-c", script], env=deployed.env, capture_output=True, text=True,
                             timeout=300)
        assert ran.returncode == 0, ran.stderr[-3000:]
        said = json.loads(ran.stdout.strip().splitlines()[-1])
        assert said["rc"] == 0, said["err"]
        status = json.loads(said["out"])
        assert status["status"] == "RUNNING" and status["model"]["name"] == tiny_model_dir.name
        (row,) = status["replicas"].values()
        assert row["alive"] is True

        def in_flight(row: dict) -> int:
            return row["requests"] - row["completed"] - row["cancelled"] - row["failed"]
        # Read while a request ran (asked through the replicas, it waited until none did: it saw
        # 15 requests, 15 completed). A read may fall between one request's end and the next's
        # start: one of four must see the replica at work.
        rows = [row] + [next(iter(again["replicas"].values())) for again in said["again"]]
        assert max(in_flight(r) for r in rows) == 1 and all(r["completed"] < 40 for r in rows)
    finally:
        deployed.dllm("ray", "delete", "--address", deployed.address, "--app", app)


async def test_the_front_outlives_its_cluster(deployed, tiny_model_dir, tmp_path):
    # Last: it stops the module's cluster. Ray ended the front (a driver) 60 s after the cluster
    # went, taking every editor's connection with it; requests meanwhile got no answer.
    deployed.deployed_tiny = False                 # an earlier test deleted the deployment
    deploy_tiny(deployed, tiny_model_dir)
    client, _, _ = await start_front(tmp_path, "--ray", deployed.address, env=deployed.env)
    try:
        open_doc(client, URI, TEXT)
        assert await client.text_document_inline_completion_async(inline_params(URI, 1, 11)) is not None
        deployed.stop()
        with pytest.raises(Exception) as caught:
            await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 60)
        assert getattr(caught.value, "code", None) == -32803 and "is gone" in str(caught.value), caught.value
        await asyncio.sleep(70)
        status = await asyncio.wait_for(client.protocol.send_request_async("dllm/status", {}), 30)
        assert status is not None                              # the front is still there
    finally:
        await stop_front(client)

"""Which models a TCP client may load (docs/deploy.md, "Models a client may choose").

A TCP client's `model` option named any folder on the server's disk, and the load's errors told a
file from a folder from nothing. Over TCP a client may name `default`, a shipped model, the
operator's `--model` and folders under `--allow-model-dir`; every other path gets one message
that says nothing of the path. The device is the operator's. Over stdio nothing changes (the
user's own editor: tests/server/test_server.py loads models from tmp folders that way)."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from lsprotocol import types

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.loader import shipped_model_names
from dllm_lsp.server.model_host import ModelChoices

from .lsp_harness import make_client, wait_loaded, wait_until
from .test_transport import start_tcp_server, stop

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_model_dir):
    """A TCP server on the tiny model, allowing one folder of models; what lies around it."""
    tmp = tmp_path_factory.mktemp("tcp-models")
    allowed = tmp / "allowed"
    write_tiny_model(allowed / "other", seed=1)
    outside = write_tiny_model(tmp / "outside", seed=2)       # a real model, just not offered
    (tmp / "secret.txt").write_text("not a model\n")
    proc, port = start_tcp_server(tmp, tiny_model_dir, "--allow-model-dir", str(allowed))
    try:
        yield port, tmp, allowed, outside
    finally:
        stop(proc)


async def connect(port: int, options: dict | None = None):
    client, seen = make_client()
    await client.start_tcp("127.0.0.1", port)
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities(),
                                                         initialization_options=options or {}))
    client.initialized(types.InitializedParams())
    return client, seen


async def close(client) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await asyncio.sleep(0.1)
    await client.stop()


async def status(client) -> dict:
    answer = await client.protocol.send_request_async("dllm/status", {})
    return answer._asdict() if hasattr(answer, "_asdict") else answer


async def configure(client, seen, settings: dict) -> str | None:
    """Send `settings` as a configuration change; the error shown for it, if any."""
    before = len(seen.messages)
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"dllm": settings}))
    await status(client)                      # answered after the change was taken
    await asyncio.sleep(0.1)
    shown = [m.message for m in seen.messages[before:] if m.type == types.MessageType.Error]
    return shown[0] if shown else None


async def test_a_tcp_client_may_not_name_folders_the_operator_did_not_offer(served, tiny_model_dir):
    port, tmp, allowed, outside = served
    client, seen = await connect(port)
    try:
        assert (await wait_loaded(client))["model"] == tiny_model_dir.name
        refused = [str(outside), str(tmp / "secret.txt"), str(tmp / "nothing-here"), str(tmp),
                   f"{allowed}/../outside", "outside", "~/models", str(allowed) + "-not", "/etc/passwd",
                   "/proc/self/environ"]
        messages = [await configure(client, seen, {"model": spec}) for spec in refused]
        assert all(m is not None for m in messages), list(zip(refused, messages))
        assert len(set(messages)) == 1, messages             # one message, whatever the path is
        assert "model refused" in messages[0] and "--allow-model-dir" in messages[0], messages[0]
        for word in ("exist", "not a folder", "config.json", str(tmp)):
            assert word not in messages[0], messages[0]
        now = await status(client)
        assert now["model"] == tiny_model_dir.name and now["loaded"] and not now["error"], now
        # what the operator offers: a folder under the allowed one, by its absolute path
        assert await configure(client, seen, {"model": str(allowed / "other")}) is None
        assert (await wait_loaded(client))["model"] == "other"
        # and the operator's own model, as spelt on its command line
        assert await configure(client, seen, {"model": str(tiny_model_dir)}) is None
        assert (await wait_loaded(client))["model"] == tiny_model_dir.name
    finally:
        await close(client)


async def test_refused_in_initialization_options_too_and_the_rest_applies(served, tiny_model_dir):
    port, tmp, allowed, outside = served
    client, seen = await connect(port, {"model": str(outside), "steps": 3})
    try:
        loaded = await wait_loaded(client)
        assert loaded["model"] == tiny_model_dir.name and not loaded["error"], loaded
        await wait_until(lambda: seen.messages)
        (shown,) = [m.message for m in seen.messages if m.type == types.MessageType.Error]
        assert shown.startswith("dllm-lsp: initializationOptions: model refused") and str(outside) not in shown
    finally:
        await close(client)


async def test_shipped_models_by_name_and_only_the_operators_device(served, tiny_model_dir):
    port, *_ = served
    client, seen = await connect(port)
    try:
        await wait_loaded(client)
        refusal = await configure(client, seen, {"device": "cuda:3"})
        assert refusal is not None and "device 'cuda:3' refused" in refusal and "'cpu'" in refusal, refusal
        assert await configure(client, seen, {"device": "auto"}) is None        # the server's choice: its own
        assert await configure(client, seen, {"device": "cpu"}) is None
        assert (await status(client))["device"] == "cpu"
        shipped = next((n for n in shipped_model_names() if "cpu" in n), shipped_model_names()[0])   # the small one
        assert await configure(client, seen, {"model": shipped}) is None
        loaded = await wait_loaded(client, timeout=120)
        assert loaded["model"] == shipped and loaded["device"] == "cpu", loaded
        # `default` over TCP is the server's own model (not the shipped default, which this
        # CPU's would be the model just loaded)
        assert await configure(client, seen, {"model": "default"}) is None
        assert (await wait_loaded(client))["model"] == tiny_model_dir.name
    finally:
        await close(client)


def test_allowed_model_dir_must_be_a_folder_and_is_for_tcp(tmp_path):
    for args, says in ((["--tcp", ":0", "--allow-model-dir", str(tmp_path / "missing")], "is not a folder"),
                       (["--allow-model-dir", str(tmp_path)], "applies to --tcp only")):
        out = subprocess.run([sys.executable, "-m", "dllm_lsp", "serve", *args], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 2 and says in out.stderr, out.stderr


def test_model_choices_judge_the_spelling_only(tmp_path):
    """Nothing on disk decides: a path that does not exist and one that does are judged alike."""
    root = tmp_path / "models"
    root.mkdir()
    (tmp_path / "real").mkdir()
    (root / "link").symlink_to(tmp_path / "real")
    choices = ModelChoices.of("/srv/operator-model", "cpu", [root])
    for ok in ("/srv/operator-model", "/srv/./operator-model", str(root), str(root / "a"),
               str(root / "link"), str(root / "no" / "such" / "folder")):
        assert choices.model_refusal(ok) is None, ok
    refusals = {choices.model_refusal(p) for p in (str(root / ".." / "real"), str(tmp_path / "real"),
                                                   str(root) + "x", "relative/path", "operator-model",
                                                   str(root / "link" / ".." / ".." / "real"))}
    assert len(refusals) == 1 and None not in refusals
    # a root given through a link allows the folder it points at too (the operator's own path)
    via_link = ModelChoices.of("default", "cpu", [root / "link"])
    assert via_link.model_refusal(str(tmp_path / "real" / "m")) is None
    assert via_link.model_refusal(str(root / "link" / "m")) is None
    assert choices.device_refusal("cpu") is None and choices.device_refusal("cpu:0") is None
    assert choices.device_refusal("cuda:1") is not None

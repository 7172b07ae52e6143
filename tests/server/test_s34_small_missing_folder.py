"""A served model folder that is missing for a moment: `dllm-lsp train` renames a new folder into
place in two steps (the old one aside, then the new one in: train/folder.py), and the GPU job's
unpack removes the folder before it copies the new one in. A connection asking for the model in
between (the options sent again, a new TCP client) got "model folder ... does not exist" and a
failed load, instead of the model already loaded from that path. It now keeps that model, says
nothing alarming, and the new files load once they are there; a missing folder with nothing of
its path loaded still fails and says why.

Real server over stdio and TCP (lsp_harness), real loads of tiny folders; the in-process test
drives the model host itself with real loads (its `connect` is the real `local_engine`)."""
import asyncio
import os
import shutil
import sys
from pathlib import Path

import pytest
from lsprotocol import types

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.checkpoints.tiny import write_tiny_checkpoint
from dllm_lsp.loader import ModelLoadError
from dllm_lsp.server.model_host import LoadKey, ModelHost

from .lsp_harness import connect_tcp, inline_params, open_doc, start_server, stop_server, wait_loaded

URI = "file:///moving/area.py"
TEXT = "def area(width, height):\n    return \n"
ALARMS = ("does not exist", "failed", "did not load", "changed")


def move_aside(folder: Path) -> Path:
    """`train`'s first rename: the served folder moved aside, the new one not yet in its place."""
    old = folder.parent / f".{folder.name}.old"
    os.replace(folder, old)
    return old


def rename_into_place(folder: Path, old: Path) -> None:
    """`train`'s second rename: a new model (another family, so dllm/status tells them apart) in
    the folder's place, and the old one removed."""
    partial = folder.parent / f".{folder.name}.partial"
    write_tiny_checkpoint(partial, "open-dcoder", shards=1)
    os.replace(partial, folder)
    shutil.rmtree(old)


async def status_of(client) -> dict:
    status = await client.protocol.send_request_async("dllm/status", {})
    return status._asdict() if hasattr(status, "_asdict") else status


async def complete(client) -> None:
    answer = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 120)
    assert answer is not None


def alarms(seen) -> list[str]:
    return [m.message for m in seen.messages if any(word in m.message for word in ALARMS)]


async def test_options_sent_again_while_the_folder_is_away_keep_the_loaded_model(tmp_path):
    folder = write_tiny_model(tmp_path / "served")
    link = tmp_path / "current"           # named through a link (~/models/current), dangling meanwhile
    link.symlink_to(folder, target_is_directory=True)
    options = {"model": str(link), "device": "cpu"}
    client, seen, _ = await start_server(tmp_path, options)
    try:
        status = await wait_loaded(client, 120)
        assert status["loaded"] and status["family"] == "embedded", status
        open_doc(client, URI, TEXT)
        await complete(client)

        old = move_aside(folder)
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=options))
        status = await wait_loaded(client, 120)
        # It had moved this connection to a failed load: loaded false, "model folder ... does not exist".
        assert status["loaded"] and status["family"] == "embedded" and status["error"] is None, status
        assert status["modelsLoaded"] == 1, status
        await complete(client)                          # answered by the model loaded from that path

        # The new folder is renamed into place; the options sent again load it.
        rename_into_place(folder, old)
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=options))
        status = await wait_loaded(client, 120)
        assert status["loaded"] and status["family"] == "open-dcoder" and status["error"] is None, status
        assert status["modelsLoaded"] == 1, status      # the model it replaces was let go
        await complete(client)
        assert not alarms(seen), alarms(seen)
    finally:
        await stop_server(client)


async def test_a_tcp_client_connecting_while_the_folder_is_away_gets_the_loaded_model(tmp_path, unused_tcp_port):
    folder = write_tiny_model(tmp_path / "shared")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dllm_lsp", "serve", "--tcp", f"127.0.0.1:{unused_tcp_port}", "--model", str(folder),
        "--device", "cpu", "--log-file", str(tmp_path / "tcp.log"))
    clients = []
    try:
        first, _ = await connect_tcp(unused_tcp_port, {})      # the server's own model
        clients.append(first)
        assert (await wait_loaded(first, 120))["family"] == "embedded"
        old = move_aside(folder)
        second, seen = await connect_tcp(unused_tcp_port, {})
        clients.append(second)
        status = await wait_loaded(second, 120)
        assert status["loaded"] and status["family"] == "embedded" and status["error"] is None, status
        assert status["modelsLoaded"] == 1, status
        open_doc(second, URI, TEXT)
        await complete(second)
        assert (await status_of(first))["loaded"]
        log = (tmp_path / "tcp.log").read_text()
        assert "is not there now (being replaced?): the model loaded from it serves on" in log, log[-3000:]

        rename_into_place(folder, old)
        third, _ = await connect_tcp(unused_tcp_port, {})
        clients.append(third)
        status = await wait_loaded(third, 120)
        assert status["loaded"] and status["family"] == "open-dcoder" and status["error"] is None, status
        assert (await status_of(second))["family"] == "open-dcoder"      # one model per folder, for all
        assert not alarms(seen), alarms(seen)
    finally:
        try:
            for client in clients:
                await stop_server(client)
        finally:
            proc.terminate()
            await proc.wait()


async def test_the_host_serves_a_path_that_is_away_only_when_it_loaded_it(tmp_path):
    run = write_tiny_model(tmp_path / "run")
    link = tmp_path / "current"
    link.symlink_to(run, target_is_directory=True)
    host = ModelHost()
    a, b, c = host.view(), host.view(), host.view()
    try:
        loaded = await a.load(str(run), "cpu")
        old = move_aside(run)
        # The path and a link to it (now dangling) both mean the model loaded from that path.
        assert not a.needs_load(str(run), "cpu")
        assert await b.load(str(run), "cpu") is loaded
        assert await c.load(str(link), "cpu") is loaded
        for view in (a, b, c):
            status = view.status()
            assert status["loaded"] and not status["loading"] and status["error"] is None, status
        assert host.status()["modelsLoaded"] == 1
        key = LoadKey.of(str(link), "cpu")
        assert key.missing and not key.resolved and key.model == str(run.resolve()), key

        # A missing folder of which nothing is loaded fails, and says why.
        with pytest.raises(ModelLoadError, match="does not exist"):
            await c.load(str(tmp_path / "never"), "cpu")
        assert "does not exist" in c.status()["error"]

        # Back in place (the same files): still the same model, not loaded again.
        os.replace(old, run)
        assert not b.needs_load(str(run), "cpu") and await b.load(str(run), "cpu") is loaded
    finally:
        host.shutdown()

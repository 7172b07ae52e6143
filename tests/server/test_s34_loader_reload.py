"""A model folder whose files are replaced (a newer checkpoint trained or unpacked into it) is loaded
again when a connection asks for the model: the same options sent again, or a new connection. The
old weights had been served for the server's life. A folder half-written, or changing while it
loads, is not served: the model loaded before serves on, and the connection is told why.

Real server over stdio and TCP (lsp_harness), real loads of tiny folders; the in-process tests
drive the model host itself with real loads (its `connect` is the real `local_engine`)."""
import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

from lsprotocol import types

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.checkpoints.tiny import write_tiny_checkpoint
from dllm_lsp.server.model_host import ModelHost, local_engine

from .lsp_harness import connect_tcp, inline_params, open_doc, start_server, stop_server, wait_loaded, wait_until

URI = "file:///reload/area.py"
TEXT = "def area(width, height):\n    return \n"


def replace_folder(folder: Path, write) -> None:
    """`write` a new model into `folder`'s place as `dllm-lsp train` saves one: written beside it,
    then renamed into place (every file a new inode)."""
    partial = folder.parent / f".{folder.name}.partial"
    write(partial)
    old = folder.parent / f".{folder.name}.old"
    os.replace(folder, old)
    os.replace(partial, folder)
    shutil.rmtree(old)


def newer_checkpoint(scratch: Path) -> Path:
    """The files of the model that replaces the first (another family, so dllm/status tells them apart)."""
    return write_tiny_checkpoint(scratch, "open-dcoder", shards=1)


async def status_of(client) -> dict:
    status = await client.protocol.send_request_async("dllm/status", {})
    return status._asdict() if hasattr(status, "_asdict") else status


async def complete(client) -> None:
    answer = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 120)
    assert answer is not None


async def test_new_files_load_when_the_options_are_sent_again_and_half_written_ones_do_not(tmp_path):
    folder = write_tiny_checkpoint(tmp_path / "coder", "open-dcoder", shards=1)
    options = {"model": str(folder), "device": "cpu"}
    client, seen, _ = await start_server(tmp_path, options)
    try:
        status = await wait_loaded(client, 120)
        assert status["loaded"] and status["family"] == "open-dcoder", status
        open_doc(client, URI, TEXT)
        await complete(client)

        # A newer model saved over the old one's files in place, caught halfway: its weights are
        # cut short. The load of these files fails; the model loaded before serves on. (Its
        # weights, float32 on disk and on the CPU, had stayed the file's memory map: rewriting the
        # file killed the server with SIGBUS at its next step.)
        new = write_tiny_model(tmp_path / "scratch")
        for name in ("config.json", "tokenizer.json"):
            shutil.copyfile(new / name, folder / name)
        weights = (new / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(weights[: len(weights) // 2])
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=options))
        status = await wait_loaded(client, 120)
        assert status["loaded"] and status["family"] == "open-dcoder", status
        error = status["error"] or ""
        assert "model files of coder changed, but the new ones did not load" in error, status
        assert "not a readable safetensors file" in error and "still served" in error, status
        await wait_until(lambda: any("still served" in m.message for m in seen.messages), 30)
        await complete(client)                  # answered by the model loaded before

        # The save finishes; the user sends the same options again.
        (folder / "model.safetensors").write_bytes(weights)
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=options))
        status = await wait_loaded(client, 120)
        assert status["loaded"] and status["family"] == "embedded" and status["error"] is None, status
        await complete(client)

        # `dllm-lsp train` renames a whole new folder into place.
        replace_folder(folder, newer_checkpoint)
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=options))
        status = await wait_loaded(client, 120)
        assert status["loaded"] and status["family"] == "open-dcoder" and status["error"] is None, status
        assert status["modelsLoaded"] == 1, status      # the replaced model was let go, not kept beside
        await complete(client)
    finally:
        await stop_server(client)


async def test_a_new_connection_gets_the_new_files_and_so_do_the_connections_before_it(tmp_path, unused_tcp_port):
    folder = write_tiny_model(tmp_path / "shared")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dllm_lsp", "serve", "--tcp", f"127.0.0.1:{unused_tcp_port}", "--model", str(folder),
        "--device", "cpu", "--log-file", str(tmp_path / "tcp.log"))
    clients = []
    try:
        first, _ = await connect_tcp(unused_tcp_port, {})      # the server's own model
        clients.append(first)
        assert (await wait_loaded(first, 120))["family"] == "embedded"
        replace_folder(folder, newer_checkpoint)
        second, _ = await connect_tcp(unused_tcp_port, {})
        clients.append(second)
        # It was handed the model already loaded, the old files', and so was every later client.
        status = await wait_loaded(second, 120)
        assert status["loaded"] and status["family"] == "open-dcoder" and status["error"] is None, status
        status = await status_of(first)                     # one model per folder: the new one for all
        assert status["family"] == "open-dcoder" and status["modelsLoaded"] == 1, status
        open_doc(first, URI, TEXT)
        await complete(first)
    finally:
        try:
            for client in clients:
                await stop_server(client)
        finally:
            proc.terminate()
            await proc.wait()


def touch_again(path: Path) -> None:
    """`path` written anew with the same text (a new file: another inode and time)."""
    text = path.read_text()
    path.unlink()
    path.write_text(text)


async def test_only_the_model_files_count_and_the_old_model_is_let_go(tmp_path):
    folder = write_tiny_model(tmp_path / "trained")
    host = ModelHost()
    a = host.view()
    try:
        old = await a.load(str(folder), "cpu")
        # A training run appends its log in the folder it trains, and writes a card beside the model.
        (folder / "train_log.jsonl").write_text('{"step": 1}\n')
        (folder / "MODEL_CARD.md").write_text("# retrained\n")
        assert not a.needs_load(str(folder), "cpu")
        touch_again(folder / "config.json")
        assert a.needs_load(str(folder), "cpu")
        new = await a.load(str(folder), "cpu")
        assert new is not old and a.engine is new and not a.needs_load(str(folder), "cpu")
        await wait_until(lambda: old.scheduler.closed, 30)    # retired as an evicted model is
    finally:
        host.shutdown()


async def test_files_that_change_while_they_load_are_not_served(tmp_path):
    folder = write_tiny_model(tmp_path / "racing")
    writes = []           # what a writer does to the folder while the host's load reads it

    def connect(model: str, device: str):
        engine = local_engine(model, device)
        while writes:
            writes.pop()()
        return engine

    host = ModelHost(connect=connect)
    a, b = host.view(), host.view()
    try:
        old = await a.load(str(folder), "cpu")
        replace_folder(folder, lambda path: write_tiny_model(path, seed=5))
        writes.append(lambda: touch_again(folder / "config.json"))    # still being written
        loading = b.start_load(str(folder), "cpu")
        try:
            await loading
        except Exception as exc:
            assert "changed while they loaded" in str(exc) and "still served" in str(exc), exc
        else:
            raise AssertionError("a model whose files changed while it loaded was served")
        for view in (a, b):                                   # the model loaded before serves on
            assert await view.ready_engine() is old
            status = view.status()
            assert status["loaded"] and not status["loading"] and "changed while they loaded" in status["error"], status
        new = await b.load(str(folder), "cpu")                # asked again, written by now
        assert new is not old and await a.ready_engine() is new and a.status()["error"] is None
        assert host.status()["modelsLoaded"] == 1
        config = json.loads((folder / "config.json").read_text())
        assert new.denoiser.model.cfg.vocab_size == config["vocab_size"]
    finally:
        host.shutdown()

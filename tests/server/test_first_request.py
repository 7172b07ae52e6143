"""The first completion after start-up: a request sent right after `initialized` (what an editor
does when it opens a file at start-up) waits for the model load instead of failing, over stdio
with the work-done-progress handshake in between and over TCP; a load that fails fails it."""
import asyncio
import sys
import threading

import pytest

from lsprotocol import types

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.loader import ModelLoadError
from dllm_lsp.server.model_host import ModelHost, ModelUnavailable

from .lsp_harness import inline_params, make_client, open_doc, start_server, stop_server, wait_loaded

URI = "file:///start/area.py"
TEXT = "def area(width, height):\n    return \n"


async def test_a_request_right_after_initialized_waits_for_the_load(tmp_path, tiny_model_dir):
    client, seen, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu"})
    try:
        open_doc(client, URI, TEXT)
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 120)
        assert answer is not None and answer.items
        assert seen.created_tokens   # the load was still reported as progress
    finally:
        await stop_server(client)


async def test_a_request_over_tcp_right_after_initialized_waits_too(tmp_path, tiny_model_dir, unused_tcp_port):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dllm_lsp", "serve", "--tcp", f"127.0.0.1:{unused_tcp_port}", "--log-file",
        str(tmp_path / "tcp.log"), "--allow-model-dir", str(tiny_model_dir.parent))   # a TCP client's folder must be allowed
    client, _ = make_client()
    try:
        for _ in range(200):
            try:
                await client.start_tcp("127.0.0.1", unused_tcp_port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        await client.initialize_async(types.InitializeParams(
            capabilities=types.ClientCapabilities(),
            initialization_options={"model": str(tiny_model_dir), "device": "cpu"}))
        client.initialized(types.InitializedParams())
        open_doc(client, URI, TEXT)
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 120)
        assert answer is not None and answer.items
    finally:
        try:
            await asyncio.wait_for(client.shutdown_async(None), 10)
            client.exit(None)
            await asyncio.wait_for(client.stop(), 10)
        finally:
            proc.terminate()
            await proc.wait()


async def test_a_request_waiting_on_a_load_that_fails_gets_its_error(tmp_path):
    client, _, _ = await start_server(tmp_path, {"model": str(tmp_path / "no-such-model"), "device": "cpu"})
    try:
        open_doc(client, URI, TEXT)
        try:
            await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 60)
        except Exception as exc:
            assert getattr(exc, "code", None) == -32803 and "does not exist" in str(exc)
        else:
            raise AssertionError("a request without a model was answered")
    finally:
        await stop_server(client)


async def test_the_wait_for_a_load_is_bounded():
    stuck = threading.Event()

    def slow_connect(model: str, device: str):
        stuck.wait(30)          # a load that does not finish in time (a stuck disk, say)
        raise ModelLoadError("gave up")

    host = ModelHost(connect=slow_connect)
    host.load_wait_s = 0.2
    host.start_load("some-model", "cpu")
    try:
        with pytest.raises(ModelUnavailable, match="still loading after 0 s"):
            await host.ready_engine()
    finally:
        stuck.set()
        host.shutdown()


async def test_connections_keep_their_own_models_and_share_equal_ones(tiny_model_dir, tmp_path):
    """Per-connection model options over one pool: equal choices share a load, another model is
    loaded beside it, and beyond max_models a model still in use is never evicted (a clear refusal)."""
    other = write_tiny_model(tmp_path / "other", seed=1)
    third = write_tiny_model(tmp_path / "third", seed=2)
    host = ModelHost(max_models=2)
    a, b, c, d = host.view(), host.view(), host.view(), host.view()
    try:
        first = await a.load(str(tiny_model_dir), "cpu")
        # shared, loaded once, however the same folder and device are spelled (`auto` is the CPU here)
        spelled = str(tiny_model_dir.parent / ".." / tiny_model_dir.parent.name / tiny_model_dir.name)
        assert await b.load(spelled, "auto") is first
        second = await c.load(str(other), "cpu")
        assert second is not first and a.engine is first and c.engine is second
        with pytest.raises(ModelUnavailable, match="at most 2 model"):
            d.start_load(str(third), "cpu")                                # both in use: refused
        assert "at most 2 model" in d.status()["error"]
        c.release()                                                        # the other model's user left
        assert await d.load(str(third), "cpu") is not second               # ... so it makes room
        assert a.engine is first and host.status()["maxModels"] == 2
    finally:
        host.shutdown()


async def test_one_bad_option_costs_the_client_only_that_option(tmp_path, tiny_model_dir):
    # It used to cost every option the client sent: the server showed the error and loaded the
    # default model instead of the client's.
    client, seen, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu", "steps": "8",
                                                    "contextTokens": 300})
    try:
        status = await wait_loaded(client)
        assert status["model"] == tiny_model_dir.name and status["contextTokens"] == 300, status
        assert any("steps ignored: steps must be an integer, not '8' (the other options apply)" in m.message
                   for m in seen.messages), seen.messages
        open_doc(client, URI, TEXT)
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 120)
        assert answer is not None
    finally:
        await stop_server(client)


async def test_a_document_closed_while_its_request_waits_for_the_load_costs_no_run(tmp_path, tiny_model_dir):
    client, _, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu"})
    try:
        open_doc(client, URI, TEXT)
        pending = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(URI, 1, 11)))
        await asyncio.sleep(0.05)
        client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(URI)))
        with pytest.raises(Exception) as closed:
            await asyncio.wait_for(pending, 120)
        assert getattr(closed.value, "code", None) == -32800 and "closed" in str(closed.value)
    finally:
        await stop_server(client)

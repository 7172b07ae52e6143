"""Start the real server as a subprocess and drive it with pygls' LanguageClient."""
from __future__ import annotations

import asyncio
import sys
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.protocol import JsonRPCRequestMessage


@dataclass
class Recorded:
    messages: list[types.ShowMessageParams] = field(default_factory=list)
    progress: list[types.ProgressParams] = field(default_factory=list)
    created_tokens: list[Any] = field(default_factory=list)


def make_client() -> tuple[LanguageClient, Recorded]:
    client = LanguageClient("dllm-lsp-tests", "v1")
    seen = Recorded()

    @client.feature(types.WINDOW_SHOW_MESSAGE)
    def show_message(params: types.ShowMessageParams) -> None:
        seen.messages.append(params)

    @client.feature(types.PROGRESS)
    def progress(params: types.ProgressParams) -> None:
        seen.progress.append(params)

    @client.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
    def create_token(params: types.WorkDoneProgressCreateParams) -> None:
        seen.created_tokens.append(params.token)

    return client, seen


async def start_server(tmp_path: Path, options: dict, work_done: bool = True):
    client, seen = make_client()
    log = tmp_path / "server.log"
    await client.start_io(sys.executable, "-m", "dllm_lsp", "serve", "--stdio", "--log-file", str(log))
    result = await client.initialize_async(
        types.InitializeParams(
            capabilities=types.ClientCapabilities(
                window=types.WindowClientCapabilities(work_done_progress=work_done),
                # as editors do: the multi-site commands send workspace/applyEdit only to a
                # client that declares it (a capability left out means unsupported)
                workspace=types.WorkspaceClientCapabilities(apply_edit=True),
            ),
            initialization_options=options,
        )
    )
    client.initialized(types.InitializedParams())
    return client, seen, result


async def stop_server(client: LanguageClient) -> None:
    try:
        await asyncio.wait_for(client.shutdown_async(None), timeout=10)
        client.exit(None)
    finally:
        await asyncio.wait_for(client.stop(), timeout=10)


async def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


async def wait_loaded(client: LanguageClient, timeout: float = 60.0) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await client.protocol.send_request_async("dllm/status", {})
        status = status._asdict() if hasattr(status, "_asdict") else status
        if (status["loaded"] or status["error"]) and not status["loading"]:
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"model not loaded: {status}")
        await asyncio.sleep(0.1)


def open_doc(client: LanguageClient, uri: str, text: str, language: str = "python", version: int = 1) -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)
        )
    )


def inline_params(uri: str, line: int, character: int) -> types.InlineCompletionParams:
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        position=types.Position(line=line, character=character),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
    )


async def send_raw_request(client: LanguageClient, method: str, params: Any) -> Any:
    """Send `params` as-is: the typed client would refuse to serialise malformed ones."""
    msg_id = f"raw-{uuid.uuid4()}"
    future: Future = Future()
    client.protocol._request_futures[msg_id] = future
    client.protocol._send_data(JsonRPCRequestMessage(id=msg_id, method=method, params=params, jsonrpc="2.0"))
    return await asyncio.wrap_future(future)


def raw_inline_params(uri: str, line: Any, character: Any) -> dict:
    """Params as plain JSON, so tests can send what a typed client would refuse to build."""
    return {
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": character},
        "context": {"triggerKind": 1},
    }


async def connect_tcp(port: int, options: dict | None = None, tries: int = 300):
    """A client initialized over TCP on `port` (a server just started: its port may not be open
    yet, so the connect is tried every 0.1 s, `tries` times), and what it was sent."""
    client, seen = make_client()
    for _ in range(tries):
        try:
            await client.start_tcp("127.0.0.1", port)
            break
        except OSError:
            await asyncio.sleep(0.1)
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities(),
                                                         initialization_options=options or {}))
    client.initialized(types.InitializedParams())
    return client, seen

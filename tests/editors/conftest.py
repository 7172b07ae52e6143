"""Fixtures of the editor end-to-end tests: the model the real server loads, and the expected
completion, asked of the same server code through `dllm-lsp complete`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dllm_lsp.net import free_port
from tests.ports import wait_listening

# Server options for a stream long enough to be seen: the tiny model denoises a line in ~10 ms,
# and an editor redraws a report only after a round trip (VS Code asks its provider again), so a
# stream that short shows one state on a busy machine. One token per step over 64 steps, every
# step reported, keeps intermediate states on screen, and leaves a few hundred milliseconds in
# which a key can be pressed while only a report is drawn.
SLOW_STREAM = {"steps": 64, "threshold": 1.0, "maxLineTokens": 64, "streamIntervalMs": 0}


@pytest.fixture(scope="session")
def editor_model(tmp_path_factory) -> Path:
    """DLLM_EDITOR_TEST_MODEL (a model folder, e.g. for nicer screenshots), else a tiny random one."""
    chosen = os.environ.get("DLLM_EDITOR_TEST_MODEL")
    if chosen:
        return Path(chosen)
    from dllm_lsp.arch.tiny import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("editor-model") / "tiny")


def server_completion(model: Path, text: str, line: int, col: int, suffix: str = ".txt") -> dict:
    """What the server completes at 0-based (line, col) of `text` (dllm-lsp complete --json)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"expected{suffix}"
        path.write_text(text, encoding="utf-8")
        out = subprocess.run(
            [sys.executable, "-m", "dllm_lsp", "complete", f"{path}:{line + 1}:{col + 1}",
             "--model", str(model), "--device", "cpu", "--json"],
            capture_output=True, text=True, timeout=180,
        )
    assert out.returncode == 0, f"dllm-lsp complete failed: {out.stderr[-2000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


def ask_fresh_server(model: Path, options: dict | None, ask) -> object:
    """Start a fresh server over stdio with these options, initialize it, run `await ask(client,
    capabilities)` and shut it down; what `ask` returns."""
    import asyncio

    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    async def run():
        client = LanguageClient("dllm-editor-tests", "v1")
        await client.start_io(sys.executable, "-m", "dllm_lsp", "serve", "--stdio")
        try:
            init = await client.initialize_async(types.InitializeParams(
                capabilities=types.ClientCapabilities(),
                initialization_options={"model": str(model), "device": "cpu", **(options or {})}))
            return await ask(client, init.capabilities)
        finally:
            try:
                await asyncio.wait_for(client.shutdown_async(None), timeout=10)
                client.exit(None)
            finally:
                await asyncio.wait_for(client.stop(), timeout=10)

    return asyncio.run(run())


def server_inline(model: Path, text: str, line: int, col: int, options: dict, language_id: str = "plaintext") -> dict:
    """What a fresh server with these options answers to textDocument/inlineCompletion at 0-based
    (line, col) of `text`, in `dllm-lsp complete --json`'s shape (completion, replace_from)."""
    from lsprotocol import types

    async def ask(client, capabilities) -> dict:
        client.initialized(types.InitializedParams())
        uri = "file:///expected/demo.txt"
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=text)))
        answer = await client.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line, col),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)))
        item = answer.items[0] if answer and answer.items else None
        if item is None:
            return {"completion": "", "replace_from": {"line": line + 1, "col": col + 1}}
        start = item.range.start if item.range is not None else types.Position(line, col)
        return {"completion": item.insert_text, "replace_from": {"line": start.line + 1, "col": start.character + 1}}

    return ask_fresh_server(model, options, ask)


def server_fill_holes(model: Path, path: Path, language_id: str, line: int, character: int,
                      options: dict | None = None) -> dict:
    """What dllm.fillHoles answers for the holes around 0-based (line, character) of the file at
    `path`, asked of a fresh server over stdio with apply=false (so nothing is edited)."""
    import asyncio

    from lsprotocol import types

    async def ask(client, capabilities) -> dict:
        commands = capabilities.execute_command_provider
        if commands is None or "dllm.fillHoles" not in (commands.commands or []):
            return {"unsupported": True}
        client.initialized(types.InitializedParams())
        uri = path.as_uri()
        client.text_document_did_open(types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language_id, version=1,
                                                 text=path.read_text(encoding="utf-8"))))
        for _ in range(600):
            status = await client.protocol.send_request_async("dllm/status", {})
            status = status._asdict() if hasattr(status, "_asdict") else status
            if status.get("loaded") or status.get("error"):
                break
            await asyncio.sleep(0.1)
        position = {"line": line, "character": character}
        result = await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="dllm.fillHoles", arguments=[uri, {"start": position, "end": position}, {"apply": False}]))
        return result._asdict() if hasattr(result, "_asdict") else result

    answer = ask_fresh_server(model, options, ask)
    return json.loads(json.dumps(answer, default=lambda o: o._asdict() if hasattr(o, "_asdict") else str(o)))


def apply_text_edits(text: str, edits: list[dict]) -> str:
    """`text` with LSP TextEdits applied (positions in UTF-16 units equal characters for the ASCII
    test files)."""
    lines = text.split("\n")
    offsets = [0]
    for l in lines:
        offsets.append(offsets[-1] + len(l) + 1)

    def offset(pos: dict) -> int:
        return offsets[pos["line"]] + pos["character"]

    for edit in sorted(edits, key=lambda e: offset(e["range"]["start"]), reverse=True):
        start, end = offset(edit["range"]["start"]), offset(edit["range"]["end"])
        text = text[:start] + edit["newText"] + text[end:]
    return text


def edits_of(workspace_edit: dict, uri: str) -> list[dict]:
    if workspace_edit.get("documentChanges"):
        return [e for change in workspace_edit["documentChanges"] for e in change["edits"]]
    return workspace_edit.get("changes", {}).get(uri, [])


class TcpServer:
    """`dllm-lsp serve --tcp 127.0.0.1:PORT` on the model, up and listening; stopped on exit."""

    def __init__(self, model: Path, log: Path, token: str | None = None):
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dllm_lsp", "serve", "--tcp", f"127.0.0.1:{self.port}", "--model", str(model),
             "--device", "cpu", "--log-file", str(log)],
            env={**os.environ, "DLLM_LSP_TOKEN": token or ""},   # with a token, clients must send it
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Wait for the port to listen without connecting: the server serves the first connection.
        try:
            wait_listening(self.port, self.process, timeout=90, connect=False)
        except AssertionError as e:
            self.close()
            raise AssertionError(f"the TCP server did not start ({e}): {log.read_text() if log.exists() else ''}")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def __enter__(self) -> "TcpServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


"""A streamed request (dllm/inlineCompletion, what VS Code sends at each keystroke) typed through
the suggestion shown is answered from it, without the model and without reports: it never was,
so the ghost text of an editor that streams blinked and went blurry again at every character
typed through and every word accepted. Real server over stdio, tiny random model."""
from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types

from dllm_lsp.bench.typing import plain

from .lsp_harness import open_doc, raw_inline_params, start_server, stop_server, wait_loaded

SOURCE = "import os\n\n\ndef area(width, height):\n    return \n\n\nprint(area(2, 3))\n"
LINE, COL = 4, 11
pytestmark = pytest.mark.timeout(300)


async def status(client) -> dict:
    return plain(await client.protocol.send_request_async("dllm/status", {}))


async def streamed(client, uri: str, col: int, token: str) -> dict:
    answer = await asyncio.wait_for(client.protocol.send_request_async(
        "dllm/inlineCompletion", {**raw_inline_params(uri, LINE, col), "partialResultToken": token}), 120)
    return plain(answer)


async def test_a_streamed_request_typed_through_is_answered_from_the_suggestion(tmp_path, tiny_model_dir):
    client, seen, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu",
                                                    "companionEdits": False, "streamIntervalMs": 0})
    try:
        assert (await wait_loaded(client))["loaded"]
        uri = "file:///streamed/through.py"
        open_doc(client, uri, SOURCE)
        first = await streamed(client, uri, COL, "first")
        text = first["items"][0]["insertText"]
        assert len(text) >= 2, first
        assert any(p.token == "first" for p in seen.progress)       # the model ran, watched
        before = await status(client)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(LINE, COL), types.Position(LINE, COL)), text=text[0])]))
        again = await streamed(client, uri, COL + 1, "again")
        after = await status(client)
        assert again["items"][0]["insertText"] == text, again
        assert again["items"][0]["range"]["start"]["character"] == COL, again
        assert after["typedThroughHits"] == before["typedThroughHits"] + 1
        assert after["batching"]["requestSteps"] == before["batching"]["requestSteps"]   # no model step
        # nothing to watch: no step's report, only the stream's end with the answer
        kinds = [plain(p.value)["kind"] for p in seen.progress if p.token == "again"]
        assert kinds == ["end"], kinds
    finally:
        await stop_server(client)

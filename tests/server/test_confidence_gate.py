"""The confidence gate (`minConfidence`) through the real server over stdio, with the shipped
model: the same completion is shown without a gate, held back by a gate above its confidence
(inline and classic completion alike), and shown again when the client lowers the gate."""
from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types

from .lsp_harness import inline_params, open_doc, start_server, stop_server, wait_loaded

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello.py"
POSITION = types.Position(line=6, character=20)      # after `    return n % 2 == `: the shipped model writes `0`

pytestmark = pytest.mark.timeout(300)


async def test_the_gate_holds_back_what_the_model_was_unsure_of(tmp_path):
    client, _, _ = await start_server(tmp_path, {"device": "cpu", "minConfidence": 1.0})
    try:
        status = await wait_loaded(client)
        assert status["loaded"], status
        uri = EXAMPLE.as_uri()
        open_doc(client, uri, EXAMPLE.read_text())
        params = inline_params(uri, POSITION.line, POSITION.character)
        gated = await client.text_document_inline_completion_async(params)
        classic = await client.text_document_completion_async(types.CompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=POSITION))
        held_back = (await client.protocol.send_request_async("dllm/status", {}))._asdict()["heldBack"]
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"dllm": {"minConfidence": None}}))
        shown = await client.text_document_inline_completion_async(params)
    finally:
        await stop_server(client)
    assert gated is None or list(gated.items) == []
    assert held_back == 2                               # the inline and the classic request
    classic_items = classic if isinstance(classic, list) else (classic.items if classic is not None else [])
    assert list(classic_items) == []
    (item,) = shown.items
    assert item.insert_text == "0" and item.range.start == POSITION

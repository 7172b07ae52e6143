"""The plain requests of one keystroke share one model run. An editor asks both
textDocument/inlineCompletion and textDocument/completion at a keystroke (VS Code with quick
suggestions, Neovim with a completion plugin beside its ghost text); each superseded the other, so
the inline request answered RequestCancelled at every keystroke and no ghost text was shown. Real
server over stdio, tiny random model."""
from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types

from dllm_lsp.bench.typing import plain

from .lsp_harness import inline_params, open_doc, start_server, stop_server, wait_loaded

SOURCE = "import os\n\n\ndef area(width, height):\n    return \n\n\nprint(area(2, 3))\n"
LINE, COL = 4, 11
# Many slow steps: the first request is still denoising when the second one comes.
OPTIONS = {"steps": 64, "threshold": 1.0, "maxLineTokens": 48, "companionEdits": False}
pytestmark = pytest.mark.timeout(300)


def classic_params(uri: str) -> types.CompletionParams:
    return types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=uri),
                                  position=types.Position(line=LINE, character=COL))


async def request_steps(client) -> int:
    return plain(await client.protocol.send_request_async("dllm/status", {}))["batching"]["requestSteps"]


async def test_an_inline_and_a_classic_request_of_one_keystroke_share_one_run(tmp_path, tiny_model_dir):
    client, _, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu", **OPTIONS})
    try:
        assert (await wait_loaded(client))["loaded"]
        uri = "file:///shared/keystroke.py"
        open_doc(client, uri, SOURCE)
        before = await request_steps(client)
        inline = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(uri, LINE, COL)))
        await asyncio.sleep(0.05)
        classic = asyncio.ensure_future(client.text_document_completion_async(classic_params(uri)))
        inline_answer, classic_answer = await asyncio.wait_for(asyncio.gather(inline, classic), 120)
        both = await request_steps(client) - before
        # Neither superseded the other: the inline one answered -32800 here.
        assert inline_answer.items and classic_answer.items, (inline_answer, classic_answer)
        assert inline_answer.items[0].insert_text in classic_answer.items[0].text_edit.new_text \
            or classic_answer.items[0].text_edit.new_text in inline_answer.items[0].insert_text

        # The same keystroke asked once: as many model steps as the two took together.
        before = await request_steps(client)
        await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(uri, LINE, COL)), 120)
        assert both == await request_steps(client) - before

        # A request at another keystroke still supersedes the run in flight.
        late = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(uri, LINE, COL)))
        await asyncio.sleep(0.05)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(LINE, COL), types.Position(LINE, COL)), text="w")]))
        newer = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(uri, LINE, COL + 1)), 120)
        with pytest.raises(Exception) as raised:
            await asyncio.wait_for(late, 120)
        assert getattr(raised.value, "code", None) == -32800, raised.value
        assert newer is not None
    finally:
        await stop_server(client)


async def test_a_cancelled_request_leaves_the_shared_run_to_the_other(tmp_path, tiny_model_dir):
    client, _, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu", **OPTIONS})
    try:
        assert (await wait_loaded(client))["loaded"]
        uri = "file:///shared/cancelled.py"
        open_doc(client, uri, SOURCE)
        inline = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(uri, LINE, COL)))
        await asyncio.sleep(0.05)
        classic = asyncio.ensure_future(client.text_document_completion_async(classic_params(uri)))
        await asyncio.sleep(0.05)
        inline.cancel()        # pygls' client sends $/cancelRequest for it
        answer = await asyncio.wait_for(classic, 120)
        assert answer.items, answer
    finally:
        await stop_server(client)

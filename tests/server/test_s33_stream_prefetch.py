"""Prefetch after an accept and typed-through reuse, probed as an editor that streams would
(a plain and a streamed request each keystroke), through the real server (stdio), with the
dllm/status counters checked against what happened."""
from __future__ import annotations

import pytest
import pytest_asyncio
from lsprotocol import types

from dllm_lsp.bench.typing import plain

from .lsp_harness import inline_params, open_doc, raw_inline_params, start_server, stop_server, wait_loaded

SOURCE = "import os\n\n\ndef area(width, height):\n    return \n\n\nprint(area(2, 3))\n"
LINE, COL = 4, 11
pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory, tiny_model_dir):
    client, _, _ = await start_server(tmp_path_factory.mktemp("prefetch"),
                                      {"model": str(tiny_model_dir), "device": "cpu", "companionEdits": False})
    assert (await wait_loaded(client))["loaded"]
    yield client
    await stop_server(client)


def change(client, uri: str, version: int, line: int, col: int, end_col: int, text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, col), types.Position(line, end_col)), text=text)]))


async def status(client) -> dict:
    return plain(await client.protocol.send_request_async("dllm/status", {}))


async def suggest(client, uri: str, line: int, col: int):
    answer = await client.text_document_inline_completion_async(inline_params(uri, line, col))
    return answer.items[0] if answer.items else None


async def accepted(client, uri: str) -> int:
    """The first suggestion at LINE:COL accepted; the cursor's column after it."""
    open_doc(client, uri, SOURCE)
    first = await suggest(client, uri, LINE, COL)
    assert first is not None and "\n" not in first.insert_text, first
    change(client, uri, 2, LINE, COL, COL, first.insert_text)
    return COL + len(first.insert_text)


async def test_one_prefetched_run_taken_by_both_requests_of_a_keystroke_is_one_hit(client):
    # VS Code with streaming sends a plain and a streamed request per keystroke: both took the one
    # prefetched run, and prefetchHits rose by two for one prefetchStarted.
    before = await status(client)
    uri = "file:///prefetch/both.py"
    col = await accepted(client, uri)
    streamed = client.protocol.send_request_async(
        "dllm/inlineCompletion", {**raw_inline_params(uri, LINE, col), "partialResultToken": "both"})
    await suggest(client, uri, LINE, col)
    await streamed
    after = await status(client)
    assert after["prefetchStarted"] == before["prefetchStarted"] + 1
    assert after["prefetchHits"] == before["prefetchHits"] + 1


async def test_after_an_accept_a_request_elsewhere_is_answered_there(client):
    before = await status(client)
    uri = "file:///prefetch/elsewhere.py"
    await accepted(client, uri)
    change(client, uri, 3, 7, 0, 0, "x = ")          # the user moves to the last line and types
    found = await suggest(client, uri, 7, 4)
    after = await status(client)
    assert after["prefetchHits"] == before["prefetchHits"]
    assert found is None or (found.range.start.line, found.range.end) == (7, types.Position(7, 4))


async def test_after_an_accept_an_edit_above_first_moves_the_cursor_not_the_prefetch(client):
    before = await status(client)
    uri = "file:///prefetch/above.py"
    col = await accepted(client, uri)
    change(client, uri, 3, 0, 0, 0, "# top\n")
    found = await suggest(client, uri, LINE + 1, col)
    after = await status(client)
    assert after["prefetchHits"] == before["prefetchHits"]      # computed for the version before the edit
    assert found is None or found.range.end == types.Position(LINE + 1, col)

"""Cache mode "reuse" through the real server: a client that types with `cache: "reuse"` gets
its next keystroke's context from the kept one (counted in dllm/status), another client with
the default keeps nothing."""
from __future__ import annotations

import pytest
from lsprotocol import types

from server.lsp_harness import inline_params, open_doc, start_server, stop_server, wait_loaded

SOURCE = "".join(f"def f{i}(x):\n    return x * {i} + len(str(x))\n\n" for i in range(30))
LINE = 40                    # the cursor's line: after many lines of context, before many


def type_char(client, uri: str, version: int, line: int, character: int, ch: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=line, character=character),
                              end=types.Position(line=line, character=character)), text=ch)]))


async def type_and_complete(client, uri: str, typed: str) -> dict:
    lines = SOURCE.split("\n")
    column = len(lines[LINE])
    for i, ch in enumerate(typed):
        type_char(client, uri, 2 + i, LINE, column + i, ch)
        result = await client.text_document_inline_completion_async(inline_params(uri, LINE, column + i + 1))
        assert isinstance(result, types.InlineCompletionList)
    context = (await wait_loaded(client))["work"].context    # nested objects arrive as named tuples
    return context._asdict()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cache", ["reuse", "dual"])
async def test_typing_with_the_context_kept(tmp_path, tiny_checkpoints, cache):
    uri = "file:///tmp/many.py"
    client, _, _ = await start_server(tmp_path, {"model": str(tiny_checkpoints["dream"]), "device": "cpu",
                                                 "steps": 4, "cache": cache})
    try:
        status = await wait_loaded(client)
        assert status["loaded"] and not status["error"], status
        open_doc(client, uri, SOURCE)
        context = await type_and_complete(client, uri, "y = f1(")
        assert context["sessions"] >= 4, context     # a few may be answered by typing through
        if cache == "reuse":
            # Every keystroke after the first kept (nearly) all of the one before's context.
            assert context["reusedTokens"] > 0.7 * context["tokens"], context
        else:
            assert context["reusedTokens"] == 0, context
    finally:
        await stop_server(client)

"""The fill a code action carries holds for the version it was offered on, and code action kinds
are matched as LSP's dotted hierarchy. Real server over stdio, tiny random model."""
from __future__ import annotations

import pytest
from lsprotocol import types
from server.lsp_harness import open_doc, start_server, stop_server, wait_loaded

from .test_server_multisite import Server

pytestmark = pytest.mark.timeout(120)

URI = "file:///tmp/s33_action_version.py"
TEXT = "def f(x):\n    return x + TODO\n\n\ndef g(y):\n    pass\n"
PASTED = "def h(z):\n    return z\n\n\n"


async def actions_at(client, line: int, character: int, only=None):
    at = types.Position(line=line, character=character)
    return await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=URI), range=types.Range(start=at, end=at),
        context=types.CodeActionContext(diagnostics=[], only=only)))


async def test_an_action_run_after_the_document_changed_fills_nothing(tmp_path, tiny_model_dir):
    client, _, initialized = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu"})
    server = Server(client, initialized)   # reads code actions as editors do, answers applyEdit
    try:
        assert (await wait_loaded(client))["loaded"]
        open_doc(client, URI, TEXT)
        [action] = await actions_at(client, 1, 17)     # in f, at its TODO
        assert action.title == "Fill 1 hole with dllm"
        # The user pastes a function above before picking the action: the action's range (f's
        # line 1) now lies in the pasted h, and g's `pass` in the scope the server would search.
        top = types.Position(line=0, character=0)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
            content_changes=[types.TextDocumentContentChangePartial(range=types.Range(start=top, end=top), text=PASTED)]))
        result = await server.command(action.command.command, action.command.arguments)
        assert result["applied"] is False and result["edit"] is None, result
        assert "changed since the range was given (version 1, now 2)" in result["reason"], result
        # Offered again on the new version, it runs.
        [again] = await actions_at(client, 5, 17)
        result = await server.command(again.command.command, again.command.arguments)
        assert "changed since" not in result.get("reason", ""), result
        assert [s["range"]["start"]["line"] for s in result["sites"]] == [5], result
    finally:
        await stop_server(client)


async def test_code_action_kinds_match_as_a_hierarchy(tmp_path, tiny_model_dir):
    client, _, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu"})
    try:
        assert (await wait_loaded(client))["loaded"]
        open_doc(client, URI, TEXT)
        assert len(await actions_at(client, 1, 17, only=["refactor"])) == 1
        assert len(await actions_at(client, 1, 17, only=["refactor.rewrite"])) == 1
        # `ref` is no kind `refactor.rewrite` belongs to (it matched as a string prefix)
        assert not await actions_at(client, 1, 17, only=["ref"])
        assert not await actions_at(client, 1, 17, only=["refactor.rewrite.other", "quickfix"])
    finally:
        await stop_server(client)

"""Two multi-site commands at once on one document, through the real server over stdio.

Both commands are computed on the same version. A client that takes a plain `changes` map (it
has not declared versioned documentChanges, so it cannot refuse a stale edit) applied the second
edit on the text the first had changed: `import sys` twice, or `return x + TODO` filled into
`return x + x.dtype(1, 1,)ype(1, 1,)`. The server now sends a document's edits one at a time,
each only while the document is still the text it was computed on.
"""
from __future__ import annotations

import asyncio
import sys

import pytest
from lsprotocol import types
from lsprotocol.converters import get_converter
from server.lsp_harness import make_client, open_doc, stop_server, wait_loaded

from dllm_lsp.bench.typing import plain
from dllm_lsp.syntax.snapshot import Snapshot

from .edits import apply_text_edits

pytestmark = pytest.mark.timeout(240)

converter = get_converter()
# How long the client holds its first answer, waiting for a second applyEdit to arrive beside
# it. Not a bound on anything: with the fix no second one comes, and the wait just runs out.
HOLD_S = 3.0
CHANGE_AFTER_S = 0.5


class Editor:
    """A client that applies edits to its own copy of each document, as an editor does: the
    edit, then didChange, then (here, once released) its answer to workspace/applyEdit."""

    def __init__(self, client, change_after_answer: bool) -> None:
        self.client = client
        self.docs: dict[str, tuple[str, int]] = {}
        self.asked = 0
        self.applied = 0
        self.second_asked = asyncio.Event()
        self.change_after_answer = change_after_answer

        @client.feature(types.WORKSPACE_APPLY_EDIT)
        async def apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
            self.asked += 1
            if self.asked == 1:
                # the user reads a confirmation; meanwhile a second edit may be sent
                try:
                    await asyncio.wait_for(self.second_asked.wait(), HOLD_S)
                except TimeoutError:
                    pass
            else:
                self.second_asked.set()
            edit = converter.unstructure(params.edit)
            assert not edit.get("documentChanges"), "this client declared no documentChanges"
            for uri, edits in edit["changes"].items():
                text, version = self.docs[uri]
                text, version = apply_text_edits(text, edits), version + 1
                self.docs[uri] = (text, version)
                if self.change_after_answer:
                    # some clients answer first and send didChange after it (a moment later: sent
                    # at once, pygls would still write it before the answer)
                    asyncio.get_running_loop().call_later(CHANGE_AFTER_S, self.send_change, uri, version, text)
                else:
                    self.send_change(uri, version, text)
            self.applied += 1
            return types.ApplyWorkspaceEditResult(applied=True)

    def send_change(self, uri: str, version: int, text: str) -> None:
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        ))

    def open(self, uri: str, text: str, language: str) -> None:
        self.docs[uri] = (text, 1)
        open_doc(self.client, uri, text, language)

    async def command(self, name: str, arguments: list) -> dict:
        return plain(await self.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=name, arguments=arguments)))


async def start(tmp_path, options: dict, change_after_answer: bool = False) -> Editor:
    client, _ = make_client()
    editor = Editor(client, change_after_answer)
    await client.start_io(sys.executable, "-m", "dllm_lsp", "serve", "--stdio",
                          "--log-file", str(tmp_path / "server.log"))
    await client.initialize_async(types.InitializeParams(
        # applyEdit, but no workspaceEdit.documentChanges: the server sends a `changes` map
        capabilities=types.ClientCapabilities(workspace=types.WorkspaceClientCapabilities(apply_edit=True)),
        initialization_options=options,
    ))
    client.initialized(types.InitializedParams())
    return editor


@pytest.mark.parametrize("change_after_answer", [False, True], ids=["didChange-then-answer", "answer-then-didChange"])
async def test_two_imports_at_once_are_added_once(tmp_path, tiny_model_dir, change_after_answer):
    """`dllm.applyCompanionEdit` needs no model output: the edit is known. The second command
    waits for the first edit's answer, then finds the document changed (or, before the client's
    didChange arrives, the version already edited) and sends nothing."""
    editor = await start(tmp_path, {"model": str(tiny_model_dir), "device": "cpu"}, change_after_answer)
    uri = "file:///tmp/s33_two_imports.py"
    try:
        editor.open(uri, "import os\n\n\nprint(sys.argv)\n", "python")
        answers = await asyncio.gather(
            editor.command("dllm.applyCompanionEdit", [uri, "import sys"]),
            editor.command("dllm.applyCompanionEdit", [uri, "import sys"]))
        first, second = sorted(answers, key=lambda a: not a["applied"])
        text, _ = editor.docs[uri]
        assert text == "import os\nimport sys\n\n\nprint(sys.argv)\n", text
        assert editor.asked == 1 and editor.applied == 1
        assert first["applied"] is True
        assert second["applied"] is False
        assert "another edit was applied" in second["reason"] or "changed" in second["reason"], second
    finally:
        await stop_server(editor.client)


async def test_two_fills_at_once_apply_once(tmp_path):
    """The shipped CPU model fills `TODO` in `return x + TODO` (with text that parses); two fills
    of it at once gave the client two edits for one version."""
    editor = await start(tmp_path, {"device": "cpu", "steps": 8})
    uri = "file:///tmp/s33_two_fills.py"
    text = "def f(x):\n    return x + TODO\n"
    hole = {"start": {"line": 1, "character": 15}, "end": {"line": 1, "character": 19}}
    try:
        status = await wait_loaded(editor.client, 120)
        assert status["loaded"], status
        editor.open(uri, text, "python")
        answers = await asyncio.gather(
            editor.command("dllm.fillHoles", [uri, hole]),
            editor.command("dllm.fillHoles", [uri, hole]))
        # the model runs one after the other: either may finish first
        first, second = sorted(answers, key=lambda a: not a["applied"])
        assert first["applied"] is True, answers
        assert second["applied"] is False and "changed" in second["reason"], second
        assert editor.asked == 1
        (edit,) = first["edit"]["changes"][uri]
        edited, _ = editor.docs[uri]
        assert edited == apply_text_edits(text, [edit]) != text
        assert Snapshot.parse(edited, "python").error_count() == 0
    finally:
        await stop_server(editor.client)

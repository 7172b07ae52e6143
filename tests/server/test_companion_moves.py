"""A suggestion that carries an import (a companion edit) is moved onto the document as it is
when it is answered (or typed through), and its import placed afresh in that version's tree
(Completion.moved). For a big document that tree may still be parsing: the move read it on the
event loop, and every client's messages waited for the parse. Real documents and trees; the parse
is held by taking the document's parse lock (TreeSlot), as tests/server/test_big_documents.py does."""
from __future__ import annotations

import asyncio
from dataclasses import replace

from lsprotocol import types

from dllm_lsp.engine.types import InfillResult
from dllm_lsp.multisite.companion import import_edit
from dllm_lsp.options import Options
from dllm_lsp.pipeline import plan
from dllm_lsp.server.completions import CompletionService
from dllm_lsp.server.documents import DocumentTrees, LspWorkspace, tree_ready
from dllm_lsp.server.model_host import ModelHost

from .held_parse import assert_still_waiting, parse_held
from .test_big_documents import MEDIUM_PY

URI = "file:///project/moved.py"


def opened(text: str) -> tuple[DocumentTrees, LspWorkspace]:
    trees, workspace = DocumentTrees(), LspWorkspace(None)
    workspace.put_text_document(types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text))
    assert trees.open(URI, "python", text) is None
    return trees, workspace


def type_in(trees: DocumentTrees, workspace: LspWorkspace, text: str, version: int, line: int = 0) -> None:
    """The user types `text` at the start of `line`, as did_change applies it."""
    at = types.Position(line=line, character=0)
    change = types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text=text)
    identifier = types.VersionedTextDocumentIdentifier(uri=URI, version=version)
    workspace.update_text_document(identifier, change)
    assert trees.change(URI, [change], workspace.get_text_document(URI)) is None


async def test_a_suggestion_with_an_import_is_moved_onto_a_big_document_off_the_loop():
    text = "import os\n\n\n" + MEDIUM_PY
    trees, workspace = opened(text)
    asked_on = trees.get(URI, workspace)[0]
    await tree_ready(asked_on)
    end = len(text)
    fresh = plan(asked_on, end, Options()).finish(InfillResult([["pass\n"]], steps=1, tokens_committed=1, latency_ms=0.0))
    assert fresh is not None and fresh.text == "pass", fresh
    shown = replace(fresh, companion=import_edit("import sys", asked_on))
    service = CompletionService(ModelHost(), trees)
    with parse_held(trees, URI):
        type_in(trees, workspace, "#\n", 2)        # answered after an edit: its tree is to parse
        settling = asyncio.ensure_future(service._settle(URI, shown, workspace))
        await assert_still_waiting(settling, "the move")
    settled = await settling
    assert settled.start == end + 2 and settled.companion.offset == len("#\nimport os\n")


async def test_a_suggestion_with_an_import_is_typed_through_off_the_loop_while_the_big_documents_tree_parses():
    """Typed through while the tree parses: the move and the check (Completion.passes_finish),
    which read the tree, run in a thread, and the loop goes on meanwhile. (Before the check,
    the model ran instead, rather than wait for the parse on the loop.)"""
    text = "import os\n\n\n" + MEDIUM_PY
    trees, workspace = opened(text)
    asked_on = trees.get(URI, workspace)[0]
    assert asked_on.tree is not None
    end = len(text)
    fresh = plan(asked_on, end, Options()).finish(InfillResult([["pass\n"]], steps=1, tokens_committed=1, latency_ms=0.0))
    assert fresh is not None and fresh.text == "pass", fresh
    service = CompletionService(ModelHost(), trees)
    service._shown[URI] = replace(fresh, companion=import_edit("import sys", asked_on))
    with parse_held(trees, URI):
        type_in(trees, workspace, "p", 2, line=text.count("\n"))
        typed = trees.get(URI, workspace)[0]
        reusing = asyncio.ensure_future(service._typed_through(URI, typed, end + 1))
        await assert_still_waiting(reusing, "the typed-through check")
    reused = await reusing
    assert reused is not None and reused.companion.offset == len("import os\n")
    assert (reused.start, reused.end, reused.text) == (end, end + 1, "pass")

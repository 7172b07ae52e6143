"""A result moved onto a version edited while the model denoised is post-processed again where it
lands (docs/serving.md, "One document version per request"), as typed-through reuse is: an exact
move can still make the text wrong there. Real documents, trees and post-processing, at the
completion service; the model's text is given (InfillResult), as the model would have written it."""
from __future__ import annotations

import pytest
from lsprotocol import types

from dllm_lsp.engine.types import InfillResult
from dllm_lsp.options import Options
from dllm_lsp.pipeline import plan
from dllm_lsp.server.completions import CompletionService
from dllm_lsp.server.documents import DocumentTrees, LspWorkspace, tree_ready
from dllm_lsp.server.model_host import ModelHost
from dllm_lsp.syntax.document import SYNC_PARSE_BYTES

pytestmark = [pytest.mark.timeout(120), pytest.mark.asyncio]

SOURCE = "def helper(n):\n    return n + 1\n\n\nx = "
PAD = "".join(f"def f{n}(x):\n    return x * {n}\n\n\n" for n in range(3000))   # over SYNC_PARSE_BYTES


async def settled_after(text: str, model_text: str, edit: types.TextDocumentContentChangePartial):
    """(the completion shown on `text` at its end, what `_settle` makes of it once `edit` came
    while the model ran, the service's counters)."""
    trees, workspace = DocumentTrees(), LspWorkspace(None)
    uri = "file:///settle/doc.py"
    workspace.put_text_document(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    trees.open(uri, "python", text)
    asked_on = trees.get(uri, workspace)[0]
    await tree_ready(asked_on)
    shown = plan(asked_on, len(text), Options()).finish(
        InfillResult([[model_text]], steps=1, tokens_committed=1, latency_ms=0.0))
    workspace.update_text_document(types.VersionedTextDocumentIdentifier(uri=uri, version=2), edit)
    trees.change(uri, [edit], workspace.get_text_document(uri))
    service = CompletionService(ModelHost(), trees)
    return shown, await service._settle(uri, shown, workspace), service.counters


def replaced(line: int, start: int, end: int, text: str) -> types.TextDocumentContentChangePartial:
    return types.TextDocumentContentChangePartial(
        range=types.Range(start=types.Position(line, start), end=types.Position(line, end)), text=text)


@pytest.mark.parametrize("pad", ["", PAD], ids=["small", "big"])
async def test_a_result_whose_callee_was_renamed_meanwhile_is_dropped(pad):
    """`x = helper(2)` was made while `helper` existed; the user renamed it to `helpme` above
    before the answer. The move is exact (the edit is lines away), and the line now calls a name
    nothing defines: post-processing refuses it there, so it is dropped, not shown."""
    text = pad + SOURCE
    assert (len(text.encode()) > SYNC_PARSE_BYTES) == bool(pad)
    line = pad.count("\n")
    shown, settled, counters = await settled_after(text, "helper(2)", replaced(line, 4, 10, "helpme"))
    assert shown is not None and shown.text == "helper(2)", shown
    assert settled is None
    assert counters["rebasedRefused"] == 1 and counters["dropped"] == 1 and counters["rebased"] == 0, counters


@pytest.mark.parametrize("pad", ["", PAD], ids=["small", "big"])
async def test_a_result_the_edit_leaves_right_is_moved_and_shown(pad):
    """The same result with a comment added above meanwhile: moved down a line and shown."""
    text = pad + SOURCE
    shown, settled, counters = await settled_after(text, "helper(2)", replaced(0, 0, 0, "# a comment\n"))
    assert settled is not None and settled.text == "helper(2)"
    assert settled.start == shown.start + len("# a comment\n") and settled.snapshot.text.startswith("# a comment\n")
    assert counters["rebased"] == 1 and counters["dropped"] == 0 and counters["rebasedRefused"] == 0, counters

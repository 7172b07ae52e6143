"""The companion import slot inside the completion service (real tiny model, real planner)."""
from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.workspace import Workspace

from dllm_lsp.engine.types import InfillRequest
from dllm_lsp.multisite.companion import companion_edit
from dllm_lsp.server.completions import CompletionService
from dllm_lsp.server.documents import DocumentTrees
from dllm_lsp.server.model_host import ModelHost
from dllm_lsp.options import Options
from dllm_lsp.syntax.snapshot import Snapshot

URI = "file:///tmp/companion_wiring.py"
TEXT = "import os\n\n\ndef area(width, height):\n    return \n"


class RecordingHost(ModelHost):
    """The real host, remembering what it was asked and what the model answered."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[InfillRequest] = []
        self.results = []

    async def run_plan(self, plan, cancel, on_step=None):
        self.requests.append(plan.request)
        result = await super().run_plan(plan, cancel, on_step)
        self.results.append(result)
        return result


OPTIONS = Options().merged({"model": "tiny", "device": "cpu", "steps": 4, "maxSpanTokens": 16, "maxLineTokens": 8})


@pytest.fixture
async def service(tiny_model_dir):
    host = RecordingHost()
    await host.load(str(tiny_model_dir), "cpu")
    trees = DocumentTrees()
    workspace = Workspace(None)
    workspace.put_text_document(types.TextDocumentItem(uri=URI, language_id="python", version=1, text=TEXT))
    trees.open(URI, "python", TEXT)
    yield CompletionService(host, trees), host, workspace
    host.shutdown()


async def test_completion_runs_the_companion_slot_jointly(service):
    completions, host, workspace = service
    settings = OPTIONS
    found = await completions.complete(URI, types.Position(line=4, character=11), workspace, settings)
    (request,) = host.requests
    assert len(request.slots) == 2 and request.slots[0].single_line          # companion first
    assert request.pieces[0].endswith("import os\n") and request.pieces[1].startswith("\n\ndef area")
    companion_text = host.results[0].candidates[0][0]
    expected = companion_edit(companion_text, Snapshot.parse(TEXT, "python"))
    # the completion carries the import exactly when the model's slot holds a new, valid one
    assert (found.companion if found is not None else None) == expected
    if found is not None:
        assert found.result.candidates[0] == host.results[0].candidates[0][1:]   # own slot only


async def test_streamed_states_do_not_show_the_companion_slot(service):
    completions, host, workspace = service
    settings = OPTIONS
    states = []
    await completions.complete(URI, types.Position(line=4, character=11), workspace, settings,
                               lambda plan, state: states.append(state))
    assert len(host.requests[-1].slots) == 2
    assert states and all(len(candidate) == 1 for s in states for candidate in s.slot_texts)


async def test_no_companion_slot_without_imports_to_follow(service):
    completions, host, workspace = service
    settings = OPTIONS
    await completions.complete(URI, types.Position(line=0, character=9), workspace, settings)   # in the imports
    assert len(host.requests[-1].slots) == 1

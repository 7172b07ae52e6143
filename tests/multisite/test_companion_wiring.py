"""The companion import slot inside the completion service (real tiny model, real planner)."""
from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.workspace import Workspace

from dllm_lsp.arch.tiny import write_tiny_model
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
        self.plans = []
        self.results = []

    async def run_plan(self, plan, cancel, on_step=None, user=0, engine=None):
        self.plans.append(plan)
        self.requests.append(plan.request)
        result = await super().run_plan(plan, cancel, on_step, user, engine)
        self.results.append(result)
        return result


OPTIONS = Options().merged({"model": "tiny", "device": "cpu", "steps": 4, "maxSpanTokens": 16, "maxLineTokens": 8,
                             "companionEdits": True})


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
    expected = companion_edit(companion_text, Snapshot.parse(TEXT, "python"), found.text) if found is not None else None
    # the completion carries the import exactly when the model's slot holds a new, valid one
    assert (found.companion if found is not None else None) == expected
    if found is not None:
        assert found.result.candidates[0] == host.results[0].candidates[0][1:]   # own slot only


async def test_streamed_states_do_not_show_the_companion_slot(service):
    completions, host, workspace = service
    settings = OPTIONS
    states = []
    await completions.complete(URI, types.Position(line=4, character=11), workspace, settings,
                               lambda plan, state, place: states.append(state))
    assert len(host.requests[-1].slots) == 2
    assert states and all(len(candidate) == 1 for s in states for candidate in s.slot_texts)


async def test_no_companion_slot_without_imports_to_follow(service):
    completions, host, workspace = service
    settings = OPTIONS
    await completions.complete(URI, types.Position(line=0, character=9), workspace, settings)   # in the imports
    assert len(host.requests[-1].slots) == 1


async def test_a_small_models_positions_bound_the_plan_so_the_canvas_fits(tmp_path):
    # A model trained on 256 positions, a cursor 300 lines below the imports: the budget is the
    # model's, the text between the companion slot and the cursor is planned to fit beside the
    # slots, and the canvas stays inside the positions.
    folder = write_tiny_model(tmp_path / "small", max_positions=256)
    body = "".join(f"value_{i} = compute({i}, os.sep)\n" for i in range(300))
    text = "import os\n\n" + body + "def area(width, height):\n    return \n" + "print(area(1, 2))\n" * 50
    uri = "file:///tmp/small_positions.py"
    host = RecordingHost()
    await host.load(str(folder), "cpu")
    trees, workspace = DocumentTrees(), Workspace(None)
    workspace.put_text_document(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    trees.open(uri, "python", text)
    line = text[:text.index("    return ")].count("\n")
    try:
        await CompletionService(host, trees).complete(uri, types.Position(line=line, character=11), workspace,
                                                      Options().merged({"steps": 2, "companionEdits": True}))
        plan = host.plans[-1]
        engine = host.engine
        assert plan.context_tokens == 256 and plan.companion is not None
        slots = sum(slot.max_tokens for slot in plan.request.slots)
        # A third of what the slots leave, in the planner's characters (2,048 before the cap).
        assert len(plan.request.pieces[1]) <= (256 - slots) // 3 * 6 < 600
        assert engine.canvas(plan.request, plan.context_tokens).length <= 256
    finally:
        host.shutdown()

"""One engine per request: the engine whose positions bounded the plan is the one that runs it,
even when the connection's model changes between planning and running (options changed, a new
model loaded). Real tiny models, real planner, real completion service."""
from __future__ import annotations

from lsprotocol import types
from pygls.workspace import Workspace

from dllm_lsp.engine.engine import Engine
from dllm_lsp.loader import load_model
from dllm_lsp.multisite.service import MultisiteService
from dllm_lsp.options import Options
from dllm_lsp.server.completions import CompletionService
from dllm_lsp.server.documents import DocumentTrees
from dllm_lsp.server.model_host import ModelHost
from dllm_lsp.syntax.snapshot import Snapshot

URI = "file:///tmp/one_engine.py"
TEXT = "def area(width, height):\n    return \n"
OPTIONS = Options().merged({"device": "cpu", "steps": 2, "maxLineTokens": 8})


class SwitchingHost(ModelHost):
    """A host whose connection changes model right after the first lookup."""

    def __init__(self, first: Engine, then: Engine) -> None:
        super().__init__()
        self.engines = [first, then]
        self.lookups = 0

    async def ready_engine(self, user: int = 0) -> Engine:
        self.lookups += 1
        return self.engines[min(self.lookups, 2) - 1]


async def test_the_planned_for_engine_runs_the_request(tiny_model_dir):
    first, then = (Engine(load_model(tiny_model_dir, "cpu")) for _ in range(2))
    host = SwitchingHost(first, then)
    trees = DocumentTrees()
    workspace = Workspace(None)
    workspace.put_text_document(types.TextDocumentItem(uri=URI, language_id="python", version=1, text=TEXT))
    trees.open(URI, "python", TEXT)
    try:
        await CompletionService(host, trees).complete(URI, types.Position(line=1, character=11), workspace, OPTIONS)
    finally:
        host.shutdown()
    assert host.lookups == 1                                    # looked up once, for planning
    assert first.work_stats()["context"]["sessions"] >= 1       # and run there
    assert then.work_stats()["context"]["sessions"] == 0


async def test_a_hole_fill_runs_on_the_engine_its_sites_were_fitted_to(tiny_model_dir):
    """The sites are fitted to one engine's tokenizer and positions; the fill looked the engine
    up again and ran on whatever the connection had by then."""
    first, then = (Engine(load_model(tiny_model_dir, "cpu")) for _ in range(2))
    host = SwitchingHost(first, then)
    source = Snapshot.parse("def f(x):\n    # TODO\n    return x\n", "python")
    try:
        report = await MultisiteService(host).fill_holes(source, 0, 0, OPTIONS)
    finally:
        host.shutdown()
    assert report.outcomes and host.lookups == 1
    assert first.work_stats()["context"]["sessions"] >= 1 and then.work_stats()["context"]["sessions"] == 0

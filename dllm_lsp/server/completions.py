"""Cursor completions for the server: document snapshot -> pipeline plan -> model -> Completion.

Shared by inline completion, classic completion and the streamed request; a newer request for
the same document cancels an older one still denoising.
"""
from __future__ import annotations

from collections.abc import Callable

from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled
from pygls.workspace import Workspace

from dllm_lsp.engine.denoise import Cancelled
from dllm_lsp.engine.engine import CancelToken
from dllm_lsp.engine.types import StepState
from dllm_lsp.options import Options
from dllm_lsp.pipeline import Completion, CompletionPlan, plan

from .documents import DocumentTrees
from .model_host import ModelHost
from .positions import offset_in_text

StepCallback = Callable[[CompletionPlan, StepState], None]


class Superseded(JsonRpcRequestCancelled):
    """A newer request for the same document took this one's place."""


class CompletionService:
    def __init__(self, host: ModelHost, trees: DocumentTrees) -> None:
        self.host = host
        self.trees = trees
        self._running: dict[str, CancelToken] = {}

    async def complete(self, uri: str, position: types.Position, workspace: Workspace, options: Options,
                       on_step: StepCallback | None = None) -> Completion | None:
        snapshot, document, language_id = self.trees.get(uri, workspace)
        if not options.planner.language_enabled(language_id):
            return None
        offset = offset_in_text(snapshot.text, position, document.position_codec)
        completion_plan = plan(snapshot, offset, options, self.trees.others(uri))
        token = self._supersede(uri)
        step = None if on_step is None else (lambda state: on_step(completion_plan, state))
        try:
            result = await self.host.run_plan(completion_plan, token, step)
        except Cancelled:
            raise Superseded("superseded by a newer request for the same document") from None
        finally:
            if self._running.get(uri) is token:
                del self._running[uri]
        return completion_plan.finish(result)

    def _supersede(self, uri: str) -> CancelToken:
        previous = self._running.get(uri)
        if previous is not None:
            previous.cancel()
        token = self._running[uri] = CancelToken()
        return token

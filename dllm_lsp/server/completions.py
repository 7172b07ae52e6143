"""One cursor completion, from LSP position to the text to insert: plan -> infill -> finish.

Shared by inline completion, classic completion and the streamed request; a newer request
for the same document cancels an older one still denoising.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled
from pygls.workspace import Workspace

from dllm_lsp.engine.denoise import Cancelled
from dllm_lsp.engine.engine import CancelToken
from dllm_lsp.engine.types import DecodeSettings, InfillResult, StepState
from dllm_lsp.planner.spans import PlannerSettings, plan_span
from dllm_lsp.planner.types import SpanPlan
from dllm_lsp.postprocess import finish

from .documents import DocumentTrees
from .model_host import ModelHost
from .positions import offset_of
from .settings import ServerSettings


@dataclass
class Completion:
    text: str              # inserted over [start, end) of the document text
    start: int
    end: int
    plan: SpanPlan
    result: InfillResult


class Superseded(JsonRpcRequestCancelled):
    """A newer request for the same document took this one's place."""


class CompletionService:
    def __init__(self, host: ModelHost, trees: DocumentTrees) -> None:
        self.host = host
        self.trees = trees
        self._running: dict[str, CancelToken] = {}

    async def complete(
        self,
        uri: str,
        position: types.Position,
        workspace: Workspace,
        settings: ServerSettings,
        on_step: Callable[[SpanPlan, StepState], None] | None = None,
    ) -> Completion | None:
        parsed, document, language_id = self.trees.get(uri, workspace)
        offset = offset_of(document, position)
        if not settings.language_enabled(language_id):
            return None
        plan = plan_span(parsed, offset, planner_settings(settings), self.trees.others(uri))
        token = self._supersede(uri)
        step_cb = (lambda state: on_step(plan, state)) if on_step is not None else None
        try:
            result = await self.host.infill(plan.request, decode_settings(settings), token, step_cb)
        except Cancelled:
            raise Superseded("superseded by a newer request for the same document") from None
        finally:
            if self._running.get(uri) is token:
                del self._running[uri]
        text = finish(plan, parsed.text, result.text)
        if text is None:
            return None
        return Completion(text, plan.replace_start, plan.replace_end, plan, result)

    def _supersede(self, uri: str) -> CancelToken:
        previous = self._running.get(uri)
        if previous is not None:
            previous.cancel()
        token = self._running[uri] = CancelToken()
        return token


def planner_settings(settings: ServerSettings) -> PlannerSettings:
    return PlannerSettings(max_span_tokens=settings.max_span_tokens, max_line_tokens=settings.max_line_tokens)


def decode_settings(settings: ServerSettings) -> DecodeSettings:
    return DecodeSettings(steps=settings.steps, threshold=settings.threshold)

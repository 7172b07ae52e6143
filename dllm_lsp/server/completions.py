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
from dllm_lsp.multisite.companion import CompanionEdit, with_companion_slot
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
    companion: CompanionEdit | None = None   # multi-site: an import the completion needs


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
        # multi-site: one more slot after the imports, filled in the same run (docs/multisite.md)
        text_then, tree_then = parsed.text, parsed.tree
        companion = (
            with_companion_slot(plan.request, text_then, language_id, plan.replace_start, tree_then)
            if settings.companion_edits else None
        )
        request = companion.request if companion is not None else plan.request
        token = self._supersede(uri)
        step_cb = None
        if on_step is not None:
            def step_cb(state: StepState) -> None:
                on_step(plan, companion.main_state(state) if companion is not None else state)
        try:
            result = await self.host.infill(request, decode_settings(settings), token, step_cb)
        except Cancelled:
            raise Superseded("superseded by a newer request for the same document") from None
        finally:
            if self._running.get(uri) is token:
                del self._running[uri]
        extra = None
        if companion is not None:
            extra = companion.edit(result, text_then, language_id, tree_then)
            result = companion.main_result(result)
        text = finish(plan, parsed.text, result.text)
        if text is None:
            return None
        return Completion(text, plan.replace_start, plan.replace_end, plan, result, extra)

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

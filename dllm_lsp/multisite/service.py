"""Runs the multi-site features against the model: one joint infill per request.

Works in document string offsets; the server's handlers turn the outcomes into LSP edits.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dllm_lsp.engine.engine import CancelToken, Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, InfillResult
from dllm_lsp.syntax.snapshot import Snapshot

from .holes import DEFAULT_MARKER, find_holes
from .next_edits import Change, EditHistory, plan_next_edits
from .sites import Outcome, Site, check_sites, joint_request, settle

# Context tokens left for the text around the sites, at the least, before sites are dropped.
MIN_CONTEXT_TOKENS = 32


class ModelRunner(Protocol):
    """What the service needs from the server's model host."""

    async def ready_engine(self) -> Engine: ...

    async def infill(self, request: InfillRequest, settings: DecodeSettings, cancel: CancelToken,
                     on_step=None) -> InfillResult: ...


@dataclass
class FillReport:
    start: int                          # the scope searched (selection or enclosing scope)
    end: int
    outcomes: list[Outcome] = field(default_factory=list)


@dataclass
class NextEditsReport:
    change: Change | None
    outcomes: list[Outcome] = field(default_factory=list)


class MultisiteService:
    def __init__(self, host: ModelRunner) -> None:
        self.host = host
        self.history = EditHistory()

    async def fill_sites(self, text: str, language_id: str, sites: Sequence[Site],
                         decode: DecodeSettings, tree=None) -> list[Outcome]:
        """Fill `sites` jointly in one denoising run; sites beyond the context budget are kept."""
        ordered = check_sites(text, sites)
        if not ordered:
            return []
        engine = await self.host.ready_engine()
        fitting = fit_to_budget(engine, text, ordered)
        dropped = [Outcome(s.start, s.end, text[s.start:s.end], s.label, "kept", "over the context budget")
                   for s in ordered[len(fitting):]]
        if not fitting:
            return dropped
        result = await self.host.infill(joint_request(text, fitting), decode, CancelToken())
        return settle(text, language_id, fitting, result.candidates[0], tree) + dropped

    async def fill_holes(self, text: str, language_id: str, start: int, end: int, decode: DecodeSettings,
                         marker: str = DEFAULT_MARKER, span_tokens: int = 64, line_tokens: int = 32,
                         tree=None) -> FillReport:
        scope = find_holes(Snapshot.parse(text, language_id, tree), start, end, marker, span_tokens, line_tokens)
        outcomes = await self.fill_sites(text, language_id, scope.holes, decode, tree)
        return FillReport(scope.start, scope.end, outcomes)

    async def next_edits(self, uri: str, text: str, language_id: str, decode: DecodeSettings,
                         line_tokens: int = 32, near_line: int | None = None, tree=None) -> NextEditsReport:
        earlier = self.history.earlier(uri, text)
        # a change on the cursor's line first, else the most recent change anywhere
        plan = None
        if near_line is not None:
            plan = plan_next_edits(earlier, text, language_id, line_tokens, near_line, tree)
        plan = plan or plan_next_edits(earlier, text, language_id, line_tokens, tree=tree)
        if plan is None:
            return NextEditsReport(None)
        outcomes = list(plan.renames)
        if plan.sites:
            outcomes += await self.fill_sites(text, language_id, plan.sites, decode, tree)
        return NextEditsReport(plan.change, sorted(outcomes, key=lambda o: o.start))


def fit_to_budget(engine: Engine, text: str, sites: Sequence[Site]) -> list[Site]:
    """The leading sites whose slots and in-between text fit the model's context, so the
    canvas (which trims only the text before the first and after the last site) fits."""
    denoiser = engine.denoiser
    budget = min(engine.context_tokens, denoiser.max_context - 1)
    kept: list[Site] = []
    used = 0
    for site in sites:
        middle = len(denoiser.encode(text[kept[-1].end:site.start])) if kept else 0
        if used + middle + site.max_tokens + MIN_CONTEXT_TOKENS > budget:
            break
        used += middle + site.max_tokens
        kept.append(site)
    return kept

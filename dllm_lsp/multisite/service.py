"""Runs the multi-site features against the model: one joint infill per request.

Works in document string offsets; the server's handlers turn the outcomes into LSP edits.
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from dllm_lsp.engine.engine import CancelToken, Engine
from dllm_lsp.engine.types import CacheSettings, DecodeSettings, InfillRequest, InfillResult
from dllm_lsp.options import Options
from dllm_lsp.syntax.languages import language_name
from dllm_lsp.syntax.snapshot import Snapshot

from .holes import DEFAULT_MARKER, find_holes
from .next_edits import Change, EditHistory, module_name, plan_next_edits
from .sites import Outcome, Site, check_sites, joint_request, settle

# Context tokens left for the text around the sites, at the least, before sites are dropped.
MIN_CONTEXT_TOKENS = 32
# Characters of the text between two sites first tokenized to learn whether it fits, per token
# of room left (a token of code covers fewer). The whole 1.3 M characters between two holes were
# tokenized, 2.4 s on the event loop, to learn that the second hole does not fit.
CHARS_PER_TOKEN_PROBE = 16


class ModelRunner(Protocol):
    """What the service needs from the server's model host."""

    async def ready_engine(self) -> Engine: ...

    async def infill(self, request: InfillRequest, settings: DecodeSettings, cancel: CancelToken,
                     on_step=None, *, context_tokens: int | None = None,
                     cache: CacheSettings = CacheSettings(), engine: Engine | None = None) -> InfillResult: ...


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

    async def fill_sites(self, source: Snapshot, sites: Sequence[Site], options: Options) -> list[Outcome]:
        """Fill `sites` jointly in one denoising run; sites beyond the context budget are kept."""
        text = source.text
        ordered = check_sites(text, sites)
        if not ordered:
            return []
        # One engine for the whole request: the sites are fitted to its tokenizer and positions,
        # so the fill runs on it even if the connection's model changes meanwhile.
        engine = await self.host.ready_engine()
        # No slot wider than the model was trained on, as completions (Options.span_tokens): the
        # holes and call sites are sized by maxSpanTokens / maxLineTokens before the model is known
        ordered = capped_to_model(ordered, engine.denoiser.max_slot)
        budget = options.planner.context_budget(engine.denoiser.max_context)
        # Tokenizing, parsing and compiling a large file take seconds: off the event loop, where
        # every client's messages (didChange, $/cancelRequest, other requests) wait.
        fitting = await asyncio.to_thread(fit_to_budget, engine, text, ordered, budget)
        dropped = [Outcome(s.start, s.end, text[s.start:s.end], s.label, "kept", "over the context budget")
                   for s in ordered[len(fitting):]]
        if not fitting:
            return dropped
        request = outer_pieces_cut(joint_request(text, fitting, language_name(source.language_id),
                                                 heal_blanks=options.planner.heal_whitespace,
                                                 heal_before=options.planner.heal_typed), budget)
        result = await self.host.infill(request, options.decode.decode_settings(alternatives=1), CancelToken(),
                                        context_tokens=budget, cache=options.model.cache_settings(), engine=engine)
        # source.tree in the thread: a large document's tree may still be parsing (documents.py)
        return await asyncio.to_thread(lambda: settle(text, source.language_id, fitting, result.candidates[0],
                                                      source.tree)) + dropped

    async def fill_holes(self, source: Snapshot, start: int, end: int, options: Options,
                         marker: str = DEFAULT_MARKER, stub_file: bool = False) -> FillReport:
        """`stub_file`: the document is a stub file (holes.is_stub_file of its URI)."""
        planner = options.planner
        scope = await asyncio.to_thread(find_holes, source, start, end, marker, planner.max_span_tokens,
                                        planner.max_line_tokens, stub_file)
        outcomes = await self.fill_sites(source, scope.holes, options)
        return FillReport(scope.start, scope.end, outcomes)

    async def next_edits(self, uri: str, source: Snapshot, options: Options,
                         near: tuple[int, int] | None = None) -> NextEditsReport:
        text, language_id = source.text, source.language_id
        # read in a thread: a large document's tree may still be parsing (server/documents.py)
        tree = await asyncio.to_thread(lambda: source.tree)
        line_tokens = options.planner.max_line_tokens
        earlier = self.history.earlier(uri, text)
        # a change on the cursor's line first, else the most recent change anywhere
        plan = None
        module = module_name(uri)   # `from <this file> import old` names the renamed function itself
        if near is not None:
            plan = await asyncio.to_thread(plan_next_edits, earlier, text, language_id, line_tokens, near, tree,
                                           module)
        plan = plan or await asyncio.to_thread(plan_next_edits, earlier, text, language_id, line_tokens, tree=tree,
                                               module_name=module)
        if plan is None:
            return NextEditsReport(None)
        outcomes = list(plan.renames)
        if plan.sites:
            outcomes += await self.fill_sites(source, plan.sites, options)
        return NextEditsReport(plan.change, sorted(outcomes, key=lambda o: o.start))


def capped_to_model(sites: Sequence[Site], max_slot: int | None) -> list[Site]:
    """`sites`, none wider than `max_slot` tokens (the model's widest trained slot; None: not
    known): a wider slot is a canvas layout the model never saw in training (the shipped preview
    was trained on slots of 48 tokens and the hole default is 64)."""
    if not max_slot:
        return list(sites)
    return [replace(site, max_tokens=max_slot) if site.max_tokens > max_slot else site for site in sites]


def fit_to_budget(engine: Engine, text: str, sites: Sequence[Site], context_tokens: int) -> list[Site]:
    """The leading sites whose slots and in-between text fit the context budget (and the model's
    positions), so the canvas (which trims only the text before the first and after the last
    site) fits."""
    denoiser = engine.denoiser
    budget = min(context_tokens, denoiser.max_context - 1)
    kept: list[Site] = []
    used = 0
    for site in sites:
        room = budget - used - site.max_tokens - MIN_CONTEXT_TOKENS   # tokens left for the text before it
        if room < 0:
            break
        between = text[kept[-1].end:site.start] if kept else ""
        middle = count_tokens(denoiser, between, room)
        if middle > room:
            break
        used += middle + site.max_tokens
        kept.append(site)
    return kept


def count_tokens(denoiser, text: str, limit: int) -> int:
    """The number of tokens of `text`, or some number above `limit` once the text is known to
    need more, tokenizing only a prefix that shows it: prefixes grow 4x from
    CHARS_PER_TOKEN_PROBE characters a token of `limit`, so a text of unusually long tokens
    (long runs of blanks) costs at most a few times more than it would whole."""
    size = (max(0, limit) + 1) * CHARS_PER_TOKEN_PROBE
    while size < len(text):
        # the cut may split one token in two: a prefix counts at most one more than its share
        if len(denoiser.encode(text[:size])) - 1 > limit:
            return limit + 1
        size *= 4
    return len(denoiser.encode(text)) if text else 0


def outer_pieces_cut(request: InfillRequest, context_tokens: int) -> InfillRequest:
    """`request` with the text before its first site and after its last one cut to
    CHARS_PER_TOKEN_PROBE characters a context token, at a line start: the engine tokenizes each
    piece whole before it keeps the budget's worth, and the tokenizer holds the GIL, so the 1.3 M
    characters after a hole stalled the event loop for seconds from the model's thread. As many
    tokens as the canvas can hold are still there."""
    limit = max(1, context_tokens) * CHARS_PER_TOKEN_PROBE
    first, last = request.pieces[0], request.pieces[-1]
    if len(first) <= limit and len(last) <= limit:
        return request
    if len(first) > limit:
        start = len(first) - limit
        line_start = first.find("\n", start) + 1
        first = first[line_start if 0 < line_start < len(first) else start:]
    if len(last) > limit:
        line_end = last.rfind("\n", 0, limit) + 1
        last = last[:line_end if line_end > 0 else limit]
    return replace(request, pieces=[first, *request.pieces[1:-1], last])

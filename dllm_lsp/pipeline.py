"""One completion, from a cursor in a document snapshot to the text to insert.

    plan(snapshot, offset, options, other_docs, model_context) -> CompletionPlan   the planner, the
        companion import slot and the one context budget, all read from this one snapshot
    CompletionPlan.run(engine, ...) -> InfillResult                    the engine (any thread)
    CompletionPlan.finish(result) -> Completion | None                 post-processing, against
        the plan's own snapshot only (never a newer version of the document)

The language server, `dllm-lsp complete`, the eval and the overhead bench all go through here,
so an editor and the command line denoise the same canvas for the same file and position.
Nothing here knows about LSP: the server turns a Completion into items (server/items.py).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from dllm_lsp.engine.engine import CancelToken, Engine
from dllm_lsp.engine.types import CacheSettings, DecodeSettings, InfillRequest, InfillResult, StepState, TokenConfidence
from dllm_lsp.multisite.companion import (COMPANION_TOKENS, MAX_BETWEEN_CHARS, CompanionEdit, CompanionSlot, import_edit,
                                          imported_names, with_companion_slot)
from dllm_lsp.options import CHARS_PER_TOKEN, Options
from dllm_lsp.planner.lines import line_bounds, line_break_near
from dllm_lsp.planner.spans import plan_span
from dllm_lsp.planner.types import PlanError, SpanPlan
from dllm_lsp.postprocess import BlockLayout, finish, unheal
from dllm_lsp.syntax.snapshot import Snapshot

__all__ = ["Completion", "CompletionPlan", "Confidence", "PlanError", "plan", "shown_confidence"]


@dataclass(frozen=True)
class Confidence:
    """How sure the model was of a completion: the commit confidences (DecodeSettings.confidence's
    kind) of the tokens the text shown was made of, their mean and the least of them."""

    mean: float
    least: float
    tokens: int

    def to_json(self) -> dict:
        return {"mean": round(self.mean, 4), "least": round(self.least, 4), "tokens": self.tokens}


def shown_confidence(shown: str, slot_text: str, tokens: list[TokenConfidence]) -> Confidence | None:
    """The confidence of the tokens of `slot_text` (the model's slot, `tokens` its tokens) that
    `shown` was made of, or None (no tokens recorded, nothing shown).

    Post-processing keeps a start of the model's text and changes only blanks on the way (the
    healed blanks, re-indentation, a trimmed end), so the tokens are matched by non-blank
    characters: a token counts when it starts before the shown text's last non-blank character
    does. The junk a one-line span's model wrote past its newline is not the completion's."""
    need = sum(not c.isspace() for c in shown)
    if need == 0 or not tokens:
        return None
    used, seen, start = [], 0, 0
    for token in tokens:
        if seen >= need:
            break
        used.append(token.confidence)
        end = min(token.end, len(slot_text))
        seen += sum(not c.isspace() for c in slot_text[start:end])
        start = end
    return Confidence(sum(used) / len(used), min(used), len(used))


@dataclass(frozen=True)
class Completion:
    """Insert `text` over [start, end) of `snapshot.text` (string offsets)."""

    text: str
    start: int
    end: int
    snapshot: Snapshot
    span: SpanPlan
    result: InfillResult
    companion: CompanionEdit | None = None   # multi-site: an import the completion needs
    confidence: Confidence | None = None     # None where the decoding records no confidences
    # Other texts for the same range (`alternatives` option: sampled candidates that post-processing
    # and the gate let through, none equal to another), for the editor to cycle through.
    alternatives: tuple[Completion, ...] = ()

    def moved(self, start: int, end: int, snapshot: Snapshot) -> Completion:
        """The completion placed on a newer snapshot. Alternatives are dropped: a move follows
        the text shown (typed through, or mapped through an edit), which the others are not. Its
        import is placed afresh on the new text (after the import block as it is now; none if the
        file has it by now): an edit above the imports would have left the old offset mid-line."""
        companion = None if self.companion is None else import_edit(self.companion.statement, snapshot)
        return replace(self, start=start, end=end, snapshot=snapshot, alternatives=(), companion=companion)

    def passes_finish(self) -> bool:
        """Whether post-processing, run at this completion's range of its own snapshot as for a
        fresh completion there (the typed word, the mid-line rules, the parse check), lets its
        text through unchanged. A completion moved onto a newer version (typed through) was
        checked on the older one, whose errors may be gone: Lua's `retur‸` kept its one error with
        `return .core.mark.mark.parametrize(`, and at `return‸`, which parses, the same text adds
        one. Reads the snapshot's tree: for a big document, off the event loop."""
        lines = self.snapshot.line_view      # post-processing reads lines as LSP counts them
        text = lines.text
        cursor = self.end - self.span.after_cursor
        span = replace(self.span, snapshot=lines, replace_start=self.start, replace_end=self.end,
                       typed_prefix=text[self.start:cursor], healed="",   # the text is already past the blanks
                       line_rest=text[self.end:line_bounds(text, cursor)[1]])
        newline = line_break_near(self.snapshot.text, cursor)
        provided = (frozenset() if self.companion is None
                    else frozenset(imported_names(self.companion.statement, self.snapshot.language)))
        written = self.text.replace("\r", "\n") if newline == "\r" else self.text
        return _finished(span, written, provided, newline) == self.text

    @property
    def typed_prefix(self) -> str:
        """The word typed before the cursor that the text replaces, on this completion's own
        snapshot: a completion moved onto a newer one (typed through, rebased) covers what was typed
        since. The plan's `span.typed_prefix` is the older version's: as filterText, editors hid
        the item at the first character typed through. Not the blanks after the cursor that a
        `{ | }` body replaces (SpanPlan.after_cursor): nothing typed, and after the cursor."""
        return self.snapshot.text[self.start:self.end - self.span.after_cursor]


@dataclass(frozen=True)
class CompletionPlan:
    snapshot: Snapshot
    span: SpanPlan
    companion: CompanionSlot | None      # the import slot filled in the same run, if any
    request: InfillRequest               # what the engine fills (companion slot first when present)
    decode: DecodeSettings
    context_tokens: int
    cache: CacheSettings
    min_confidence: float | None = None  # show only completions made this confidently on average (None: all)
    newline: str = "\n"                  # the file's line break at the cursor: the text shown uses it

    def run(self, engine: Engine, cancel: CancelToken | None = None,
            on_step: Callable[[StepState], None] | None = None) -> InfillResult:
        """Fill the plan's request on `engine` (blocking; the server calls it on its model thread).
        `on_step` sees the cursor's slots only, as `finish` does."""
        step = None if on_step is None else (lambda state: on_step(self.step_state(state)))
        return engine.infill(self.request, self.decode, cancel, step,
                             context_tokens=self.context_tokens, cache=self.cache)

    def step_state(self, state: StepState) -> StepState:
        """A streamed step as the cursor request sees it: without the companion slot, and its text
        read from the cursor's range on (the healed blanks taken out, postprocess.unheal), a
        multi-line body laid out as `finish` lays out the final text (`_body_layout`), its line
        breaks the file's own, as `finish` writes them (a CRLF or lone-CR file's)."""
        state = self.companion.main_state(state) if self.companion is not None else state
        layout = self._body_layout
        if not self.span.healed and self.newline == "\n" and layout is None:
            return state
        texts = []
        for slots in state.slot_texts:
            text = unheal(self.span, slots[0].replace("\r\n", "\n"))
            if layout is not None:
                text = _laid_out(layout, text)
            texts.append([text.replace("\n", self.newline), *slots[1:]])
        return replace(state, slot_texts=texts)

    @cached_property
    def _body_layout(self) -> BlockLayout | None:
        """How a multi-line span's text is laid out (None for the others: what the model writes is
        what is shown, as far as the text goes). Worked out once per plan, not at every step."""
        span = self.span
        if span.single_line or span.kind == "arrow_tail":   # the kinds postprocess._finish_block leaves
            return None
        return BlockLayout.of(span, span.snapshot.text)

    def model_text(self, result: InfillResult) -> str:
        """The cursor slot's text as post-processing reads it (the healed blanks taken out): what
        `finish` showed or refused, for a message that says why."""
        if self.companion is not None:
            result = self.companion.main_result(result)
        return unheal(self.span, result.text)

    def finish(self, result: InfillResult, gate: bool = True) -> Completion | None:
        """The completion to show for `result` (a result of this plan's request), or None: its
        first candidate's, with the other candidates' as `alternatives` (sampled; the first is
        greedy). `gate=False`: also one the model was less sure of than `min_confidence` (what was
        held back). Without a first completion there are no alternatives: the editor's first
        suggestion is the model's most likely one or nothing."""
        full = result
        provided: frozenset[str] = frozenset()
        if self.companion is not None:
            result = self.companion.main_result(result)
            provided = self.companion.provided_names(full, self.snapshot)
        first = self._candidate(result, 0, gate, provided)
        if first is None:
            return None
        edit = self.companion.edit(full, self.snapshot, first.text) if self.companion is not None else None
        alternatives, seen = [], {first.text}
        for index in range(1, len(result.candidates)):
            other = self._candidate(result, index, gate)   # alternatives come without the import
            if other is not None and other.text not in seen:
                seen.add(other.text)
                alternatives.append(other)
        return replace(first, companion=edit, alternatives=tuple(alternatives))

    def _candidate(self, result: InfillResult, index: int, gate: bool,
                   provided: frozenset[str] = frozenset()) -> Completion | None:
        """Candidate `index` of `result` (cursor slot first) post-processed and gated, or None;
        `provided`: the names the companion import shown with it brings in."""
        raw = result.candidates[index][0]
        text = _finished(self.span, raw, provided, self.newline)
        if text is None:
            return None
        confidence = None
        if result.confidences:
            confidence = shown_confidence(text, raw, result.confidences[index][0])
        if (gate and self.min_confidence is not None and confidence is not None
                and confidence.mean < self.min_confidence):
            return None
        return Completion(text, self.span.replace_start, self.span.replace_end, self.snapshot, self.span, result,
                          None, confidence)


def _laid_out(layout: BlockLayout, text: str) -> str:
    """A streamed step's text laid out as `finish` lays out the final one: re-indented, the lines
    the suffix already has cut, after a header on lines of their own. The parse check and the
    bracket rule are left out: a step's text, its masked positions left out, is not code yet, and
    the final text is what they check."""
    lines = layout.trimmed(layout.lines(text))
    while lines and not lines[-1].strip():
        lines.pop()
    return layout.render(lines, "\n") if lines else ""   # nothing but blanks decided yet: nothing to lay out


def _finished(span: SpanPlan, raw: str, provided: frozenset[str], newline: str) -> str | None:
    """postprocess.finish, its line breaks the file's: it works on the lines LSP counts, where a
    lone CR reads as LF."""
    text = finish(span, raw, provided)
    if text is not None and newline == "\r":
        text = text.replace("\n", "\r")
    return text


def plan(snapshot: Snapshot, offset: int, options: Options = Options(),
         other_docs: Sequence[tuple[str, str]] = (), model_context: int | None = None,
         model_max_slot: int | None = None) -> CompletionPlan:
    """Plan the completion at string offset `offset` of `snapshot`. `other_docs` are (uri, text)
    of other open documents, for cross-file snippets. PlanError when the offset is not in the text.

    One context budget: `options.planner.context_tokens`, capped by `model_context` (the
    positions of the model that will run the plan, `engine.denoiser.max_context`; None: not
    known). The planner's character window, the text the companion slot keeps before the
    cursor and the engine's canvas all derive from it. `model_max_slot` (`denoiser.max_slot`)
    caps the slot sizes at the widest the model was trained on."""
    budget = options.planner.context_budget(model_context)
    planner = options.planner.planner_settings(budget, model_max_slot)
    # planned and post-processed on the lines as LSP counts them (a lone CR read as LF); the
    # completion itself stays on `snapshot`, the text the editor has
    lines = snapshot.line_view
    span = plan_span(lines, offset, planner, other_docs)
    companion = None
    if options.planner.companion_edits:
        # The engine never cuts the text between two slots unless it must, so it has to fit
        # beside the slots: a third of the tokens the slots leave (1,872 characters at the
        # default budget; a 256-position model keeps 336, not 2,048 characters, ~360 tokens,
        # that pushed its canvas past the positions it was trained on).
        slot_tokens = sum(slot.max_tokens for slot in span.request.slots) + COMPANION_TOKENS
        between = min(MAX_BETWEEN_CHARS, max(budget - slot_tokens, 0) // 3 * CHARS_PER_TOKEN)
        if between > 0:
            companion = with_companion_slot(span.request, lines, span.replace_start - len(span.healed),
                                            max_between_chars=between)
    request = companion.request if companion is not None else span.request
    newline = line_break_near(snapshot.text, offset)
    return CompletionPlan(snapshot, span, companion, request, options.decode.decode_settings(),
                          budget, options.model.cache_settings(), options.decode.min_confidence, newline)

"""plan_span: from a cursor in a parsed document to the infill request the engine runs.

The shape of the hole comes from shapes.py, the context window from context.py; this module
puts them together under the budgets in PlannerSettings.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dllm_lsp.engine.types import InfillRequest

from .context import prefix_cut, query_words, relevant_snippets, suffix_cut
from dllm_lsp.syntax.languages import facts_for, language_name
from dllm_lsp.syntax.snapshot import Snapshot
from .lines import line_bounds
from .shapes import NEW_LINE_KINDS, Shape, cursor_shape
from .types import PlanError, SpanPlan


@dataclass(frozen=True)
class PlannerSettings:
    max_span_tokens: int = 64       # multi-line spans (block bodies, new lines)
    max_line_tokens: int = 32       # one-line spans (line tails, arguments, strings, identifiers)
    # These defaults are the options schema's (dllm_lsp/options.py builds the server's settings;
    # tests/architecture/test_options_schema.py checks they agree): 1,024 tokens of ~6 characters.
    context_chars: int = 6144       # prefix + suffix budget
    prefix_share: float = 0.75      # share of the budget that goes before the cursor
    snippet_chars: int = 1500       # at most this much of the prefix budget goes to other documents
    snippet_lines: int = 12         # other documents are cut into chunks of this many lines
    min_snippet_overlap: int = 2    # a chunk must share this many identifiers with the cursor's surroundings
    prefix_quantum: int = 256       # the prefix start moves in steps of this many characters (cache reuse)
    heal_whitespace: bool = True    # the blanks typed before the span go to the model (token healing, below)
    heal_typed: bool = True         # what the prefix left out (blanks, a word typed halfway, a token's
                                    # first punctuation: engine/token_healing.py) starts the slot

    def __post_init__(self) -> None:
        for name in ("max_span_tokens", "max_line_tokens", "context_chars", "snippet_lines", "prefix_quantum"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PlannerSettings.{name} must be a positive integer, got {value!r}")
        if self.snippet_chars < 0 or self.min_snippet_overlap < 1:
            raise ValueError("PlannerSettings.snippet_chars must be >= 0 and min_snippet_overlap >= 1")
        if not 0.0 < self.prefix_share < 1.0:
            raise ValueError(f"PlannerSettings.prefix_share must be within (0, 1), got {self.prefix_share!r}")


def plan_span(
    snapshot: Snapshot,
    offset: int,
    settings: PlannerSettings | None = None,
    other_documents: Sequence[tuple[str, str]] = (),
) -> SpanPlan:
    """Plan the completion at string offset `offset` of `snapshot`; other_documents are (uri, text)
    pairs. PlanError when the offset is not in the text."""
    settings = settings or PlannerSettings()
    text = snapshot.text
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset <= len(text):
        raise PlanError(f"cursor offset {offset!r} is outside the document (0..{len(text)})")
    facts = facts_for(snapshot.language_id)
    shape = cursor_shape(snapshot, offset, facts)

    prefix_budget = int(settings.context_chars * settings.prefix_share)
    suffix_budget = settings.context_chars - prefix_budget
    snippets, sources = "", ()
    if other_documents and facts.line_comment and settings.snippet_chars:
        snippets, sources = relevant_snippets(
            query_words(text, shape.replace_start, offset), other_documents,
            min(settings.snippet_chars, prefix_budget // 2), facts.line_comment,
            settings.snippet_lines, settings.min_snippet_overlap)
    start = prefix_cut(text, shape.replace_start, prefix_budget - len(snippets), settings.prefix_quantum)
    end = suffix_cut(text, offset, suffix_budget)

    max_tokens = settings.max_line_tokens if shape.single_line else settings.max_span_tokens
    healed = healed_blanks(text, shape) if settings.heal_whitespace else ""
    typed = text[shape.replace_start: offset]
    # What was typed and left out of the prefix is the slot's required start (engine/span_starts.py):
    # the model writes the healed blanks and the word typed halfway itself, but only as typed.
    request = InfillRequest.single(snippets + text[start: shape.replace_start - len(healed)], text[offset:end],
                                   max_tokens, shape.single_line, language_name(snapshot.language_id),
                                   starts_with=healed + typed if settings.heal_typed else "",
                                   heal_before=settings.heal_typed)
    return SpanPlan(
        request=request,
        snapshot=snapshot,
        kind=shape.kind,
        replace_start=shape.replace_start,
        replace_end=offset + shape.after_cursor,
        typed_prefix=typed,
        healed=healed,
        single_line=shape.single_line,
        indent=shape.indent,
        language=snapshot.language,
        indent_unit=shape.indent_unit,
        line_rest=text[offset + shape.after_cursor: line_bounds(text, offset)[1]],
        closer_indent=shape.closer_indent,
        after_cursor=shape.after_cursor,
        context_start=start,
        context_end=end,
        snippet_sources=sources,
    )


def healed_blanks(text: str, shape: Shape) -> str:
    """The spaces and tabs typed just before the span on its line, which the request leaves out of
    its prefix so that the model writes them itself (token healing).

    Why: a tokenizer attaches a word's leading space to the word (` return`, ` foo`) and writes an
    indentation as one token, so a prefix that ends in blanks ends in a token the model has seen
    only before a line's first word or never at all: after `    ` the model has to continue with a
    `return` it has met only as ` return`. On a blank line indented by the editor (what Enter
    leaves in every editor) the shipped model then wrote junk the parse check refused: 19% of
    HumanEval's single lines shown against 63% with the prefix ending at the line start
    (docs/eval.md#the-editors-path). Only blanks on the span's own line, and not after a block
    header's last character (`def f(): |`: the body starts on the next line anyway; a span that
    goes on from the cursor's line, an `arrow_tail` block too, has them healed).
    post-processing takes the blanks back out of the model's text (postprocess.unheal)."""
    line_start = text.rfind("\n", 0, shape.replace_start) + 1
    before = text[line_start: shape.replace_start]
    blanks = before[len(before.rstrip(" \t")):]
    if not blanks or (shape.kind in NEW_LINE_KINDS and blanks != before):
        return ""
    return blanks

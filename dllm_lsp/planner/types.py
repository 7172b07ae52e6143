"""What the span planner tells the server about one cursor position."""
from __future__ import annotations

from dataclasses import dataclass, field

from dllm_lsp.engine.types import InfillRequest
from dllm_lsp.syntax.snapshot import Snapshot

class PlanError(ValueError):
    """The client asked for something the planner cannot plan (a cursor outside the document):
    the one kind of failure a server answers with InvalidParams."""


SpanKind = str   # "line_tail" | "arrow_tail" | "block_body" | "arguments" | "string" | "identifier" | "line"  (see shapes.py)


@dataclass
class SpanPlan:
    """The engine request for a cursor, plus what post-processing needs to place the result.

    Offsets are Python string indices into the document text.
    """

    request: InfillRequest
    snapshot: Snapshot = field(repr=False, compare=False)   # the text + tree planned on; finish() reads only this
    kind: SpanKind
    replace_start: int        # where the inserted text begins (before the cursor when mid-identifier)
    replace_end: int          # the cursor (+ after_cursor): text between replace_start and the cursor is `typed_prefix`
    typed_prefix: str         # the partial word already typed; the completion must start with it
    single_line: bool
    indent: str               # indentation a multi-line body uses (the block's inner indent)
    language: str | None      # tree-sitter language name used, None for line rules
    # Added by the planner for post-processing and for callers that want to know more:
    indent_unit: str = "    "         # one indentation step as the file writes it
    line_rest: str = ""               # the cursor line after the cursor (what a one-line span stops before)
    closer_indent: str | None = None  # `{|}`: a multi-line body ends with a newline and this indentation
    context_start: int = 0            # the document text the request shows is [context_start, context_end)
    context_end: int = 0
    snippet_sources: tuple[str, ...] = ()   # other documents whose snippets were prepended to the prefix
    # The blanks typed before replace_start on its line that the request's prefix leaves out: the
    # model writes them itself (token healing, spans.healed_blanks) and postprocess.unheal takes
    # them back out of its text, which then reads as the text after replace_start.
    healed: str = ""
    # Characters after the cursor the span replaces (replace_end = cursor + after_cursor): the blanks
    # between the cursor and the `}` of `{ | }` on a line indented less than they are (shapes.py).
    after_cursor: int = 0

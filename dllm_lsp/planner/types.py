"""What the span planner tells the server about one cursor position."""
from __future__ import annotations

from dataclasses import dataclass

from dllm_lsp.engine.types import InfillRequest

SpanKind = str   # "line_tail" | "block_body" | "arguments" | "string" | "identifier" | "line"


@dataclass
class SpanPlan:
    """The engine request for a cursor, plus what post-processing needs to place the result.

    Offsets are Python string indices into the document text.
    """

    request: InfillRequest
    kind: SpanKind
    replace_start: int        # where the inserted text begins (before the cursor when mid-identifier)
    replace_end: int          # the cursor: text between replace_start and here is `typed_prefix`
    typed_prefix: str         # the partial word already typed; the completion must start with it
    single_line: bool
    indent: str               # indentation a multi-line body uses (the block's inner indent)
    language: str | None      # tree-sitter language name used, None for line rules

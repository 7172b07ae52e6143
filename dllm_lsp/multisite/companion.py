"""Companion edits: the import a completion needs, filled in the same denoising run.

The completion's request gets one more masked one-line slot at the start of the line after
the file's import block. The model fills both jointly; when the companion slot holds a
syntactically valid import statement that the file does not already have and that brings in a
name the completion uses, the completion carries it (classic items as `additionalTextEdits`,
inline items as an accept command). Anything else in that slot (empty, prose, a broken or
duplicate import, an import of nothing the completion needs) is dropped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from dllm_lsp.engine.types import InfillRequest, InfillResult, Slot, StepState

from dllm_lsp.planner.lines import line_break_near
from dllm_lsp.syntax.snapshot import Snapshot

from .node_types import COMMENT_TYPES

COMPANION_TOKENS = 24
APPLY_COMMAND = "dllm.applyCompanionEdit"

IMPORT_TYPES: dict[str, frozenset[str]] = {
    "python": frozenset({"import_statement", "import_from_statement", "future_import_statement"}),
    "javascript": frozenset({"import_statement"}),
    "typescript": frozenset({"import_statement"}),
    "tsx": frozenset({"import_statement"}),
    "rust": frozenset({"use_declaration", "extern_crate_declaration"}),
    "go": frozenset({"import_declaration"}),
    "java": frozenset({"import_declaration"}),
    "c": frozenset({"preproc_include"}),
    "cpp": frozenset({"preproc_include"}),
}
# Top-level nodes that may come before the imports without ending the import block. (Without the
# shebang, `#!/usr/bin/env node` ended the header at once and the import went above it: a file
# that no longer runs, nor parses.)
HEADER_TYPES = COMMENT_TYPES | frozenset({"package_clause", "package_declaration", "inner_attribute_item",
                                          "hash_bang_line", "shebang"})
# How far back the text before the insertion point must match when finding it in a prefix piece.
ANCHOR_CHARS = 200
# Text kept between the companion slot and the cursor, and before the slot when the planner's
# prefix no longer reaches the imports; where the kept part before the cursor may start.
MAX_BETWEEN_CHARS = 2048
HEADER_CHARS = 1024
QUANTUM_CHARS = 256


@dataclass(frozen=True)
class CompanionEdit:
    """Insert `text` (one import line, newline included) at string offset `offset`."""

    offset: int
    text: str
    statement: str     # the import itself, as the accept command carries it


def import_types(language: str | None) -> frozenset[str]:
    return IMPORT_TYPES.get(language or "", frozenset())


def is_docstring(source: Snapshot, node) -> bool:
    """A leading string statement: Python's module docstring, JavaScript's "use strict"."""
    return node.type == "expression_statement" and node.named_child_count == 1 and \
        node.named_children[0].type == "string"


_LINE_END = re.compile(r"\r\n|\r|\n")


def insertion_offset(source: Snapshot) -> tuple[int, bool] | None:
    """(offset, needs a newline first): the start of the line after the import block (after
    the file's header comments, docstring or package line when it has no imports); None when
    the language has no imports we know."""
    kinds = import_types(source.language)
    if source.tree is None or not kinds:
        return None
    last_import = last_header = None
    children, guard = header_children(source)
    for child in children:
        if child.type in kinds:
            last_import = child
        elif child.type in HEADER_TYPES or child.id == guard or is_pragma_once(source, child) or \
                (last_import is None and is_docstring(source, child)):
            # a comment after the imports may belong to the code below it: never insert after it
            last_header = last_header if last_import is not None else child
        else:
            break
    anchor = last_import or last_header
    if anchor is None:
        return (1 if source.text.startswith("\ufeff") else 0), False   # after a byte order mark
    end = source.end(anchor)
    if source.text[end - 1:end] == "\n":   # Rust's line comments own their newline
        return end, False
    found = _LINE_END.search(source.text, end)   # `\r\n`, `\n` or a lone `\r`, as LSP ends lines
    if found is None:
        return len(source.text), True
    return found.end(), False


def header_children(source: Snapshot) -> tuple[list, int | None]:
    """The top-level nodes the import block is looked for in, and the id of an include guard's
    `#define` (a header line): in a C/C++ header whose include guard holds the rest of the file,
    the nodes inside the guard, so an `#include` goes inside it, not above the `#ifndef`."""
    children = source.root.named_children
    code = [c for c in children if c.type not in COMMENT_TYPES]
    if source.language in ("c", "cpp") and len(code) == 1 and code[0].type == "preproc_ifdef":
        guard = code[0]
        name = guard.child_by_field_name("name")
        inner = [c for c in guard.named_children if name is None or c.id != name.id]
        if inner and inner[0].type == "preproc_def" and name is not None and \
                source.node_text(inner[0].child_by_field_name("name") or inner[0]) == source.node_text(name):
            leading = [c for c in children if c.end_byte <= guard.start_byte]
            return leading + inner, inner[0].id
    return children, None


def is_pragma_once(source: Snapshot, node) -> bool:
    return node.type == "preproc_call" and " ".join(source.node_text(node).split()) == "#pragma once"


def normalized(statement: str) -> str:
    return " ".join(statement.replace(";", " ").split())


def existing_imports(source: Snapshot) -> set[str]:
    kinds = import_types(source.language)
    return {normalized(source.node_text(n)) for n in header_children(source)[0] if n.type in kinds}


def is_valid_import(statement: str, language_id: str) -> bool:
    """True when `statement` alone parses as exactly one import statement, without errors."""
    probe = Snapshot.parse(statement + "\n", language_id)
    kinds = import_types(probe.language)
    if probe.tree is None or not kinds or probe.error_count() or probe.root.has_error:
        return False
    nodes = [n for n in probe.root.named_children if n.type not in COMMENT_TYPES]
    return len(nodes) == 1 and nodes[0].type in kinds


_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*")
_ALIASED = re.compile(r"[\w$.*]+\s+as\s+([A-Za-z_$][\w$]*)")
_QUOTED = re.compile(r"""["'<]([^"'<>]*)[">']""")


def imported_names(statement: str, language: str | None) -> set[str]:
    """The names a valid import `statement` brings into the file (`import numpy as np`: np;
    `from a import b, c as d`: b, d; `use std::io::{Read, Write as W};`: Read, W; `import
    "net/http"`: http; `#include <vector>`: vector, the header's name, the best a C file says)."""
    text = _ALIASED.sub(lambda m: m.group(1), statement.strip().rstrip(";"))
    if language == "python":
        if text.startswith("from "):
            return set(_IDENTIFIER.findall(text.partition(" import ")[2]))
        return {item.strip().split(".")[0] for item in text[len("import "):].split(",") if item.strip()}
    if language in ("c", "cpp", "go"):
        paths = _QUOTED.findall(text)
        names = {re.split(r"[/\\]", path)[-1].split(".")[0] for path in paths}
        alias = [word for word in _IDENTIFIER.findall(_QUOTED.sub(" ", text)) if word != "import"]
        return {alias[-1]} if language == "go" and alias else names      # go: import f "fmt" binds f
    if language in ("javascript", "typescript", "tsx"):
        bound = text.partition(" from ")[0] if " from " in text else ""
        return set(_IDENTIFIER.findall(bound)) - {"import", "type", "typeof"}
    # rust `use a::b::{c, d};`, java `import a.b.C;`: the last segment of each path
    return set(re.findall(r"([A-Za-z_$][\w$]*)\s*(?=[,}]|$)", text)) - {"self", "super", "crate"}


def companion_edit(slot_text: str, source: Snapshot, completion: str) -> CompanionEdit | None:
    """The edit that adds the import the model wrote in the companion slot to `source`, or None
    when the slot holds no valid import, the file already has it, or it brings in no name that
    `completion` (the text the cursor's completion inserts) uses: an import the completion does
    not need is not added to the user's file with it (the CPU preview's slot wrote
    `from torch import logging` beside completions that use neither name)."""
    if not isinstance(slot_text, str) or not isinstance(completion, str):
        return None
    lines = slot_text.strip().splitlines()
    statement = lines[0].strip() if lines else ""
    edit = import_edit(statement, source)
    if edit is None or not imported_names(statement, source.language) & set(_IDENTIFIER.findall(completion)):
        return None
    return edit


def import_edit(statement: str, source: Snapshot) -> CompanionEdit | None:
    """The edit that adds the import `statement` to `source` after its imports, or None when it is
    not one valid import or the file already has it (the accept command checks again here: the
    file may have changed since the completion was shown)."""
    if not isinstance(statement, str):
        return None
    statement = statement.strip()
    if not statement or not is_valid_import(statement, source.language_id):
        return None
    if normalized(statement) in existing_imports(source):
        return None
    where = insertion_offset(source)
    if where is None:
        return None
    offset, newline_first = where
    newline = line_break_near(source.text, max(0, offset - 1))   # the break of the line it follows
    return CompanionEdit(offset, (newline if newline_first else "") + statement + newline, statement)


@dataclass
class CompanionSlot:
    """A cursor request with the companion slot added in front of its own slots."""

    offset: int                 # document offset the companion slot stands for
    request: InfillRequest      # what to give the engine

    def main_result(self, result: InfillResult) -> InfillResult:
        """The result as the plain cursor request would have had it (companion slot removed)."""
        return replace(result, candidates=[c[1:] for c in result.candidates],
                       confidences=None if result.confidences is None else [c[1:] for c in result.confidences])

    def main_state(self, state: StepState) -> StepState:
        """A streamed step without the companion slot, for progress reports."""
        return replace(state, slot_texts=[c[1:] for c in state.slot_texts])

    def slot_text(self, result: InfillResult) -> str:
        return result.candidates[0][0]

    def provided_names(self, result: InfillResult, source: Snapshot) -> frozenset[str]:
        """The names the import in `result`'s companion slot would bring into `source` (none when
        it holds no import the file could take): the completion may call them (`np.zeros(x)`
        beside `import numpy as np`), which post-processing otherwise refuses as undefined."""
        lines = self.slot_text(result).strip().splitlines()
        statement = lines[0].strip() if lines else ""
        if import_edit(statement, source) is None:
            return frozenset()
        return frozenset(imported_names(statement, source.language))

    def edit(self, result: InfillResult, source: Snapshot, completion: str) -> CompanionEdit | None:
        """The import `result`'s companion slot holds, if `completion` (what the cursor's slot
        inserts) needs it."""
        return companion_edit(self.slot_text(result), source, completion)


def with_companion_slot(
    request: InfillRequest,
    source: Snapshot,
    prefix_end: int,
    max_tokens: int = COMPANION_TOKENS,
    max_between_chars: int = MAX_BETWEEN_CHARS,
) -> CompanionSlot | None:
    """`request` (whose first piece ends at document offset `prefix_end`) with a one-line
    companion slot at the insertion point after the imports; None when the language has no
    imports, the cursor is above or inside the import block, or the first piece does not end
    with the document text before the cursor.

    The text between two slots has to fit beside them in the model's positions (the canvas
    builder cuts it only as a last resort), so at most `max_between_chars` of text (sized from
    the budget by pipeline.plan) stay between the companion slot and the cursor: further down a
    long file the canvas shows the import block, the slot, then the last part before the
    cursor. That part starts
    at a multiple of QUANTUM_CHARS (then at a line start) so it stays put while the user
    types, and the model's context cache keeps matching."""
    doc_text = source.text
    where = insertion_offset(source)
    if where is None or where[1]:
        return None
    offset = where[0]
    if offset >= prefix_end or prefix_end > len(doc_text):
        return None
    prefix = request.pieces[0]
    between = doc_text[offset:prefix_end]
    split = len(prefix) - len(between)
    anchor = doc_text[max(0, offset - ANCHOR_CHARS):offset]
    head = prefix[:split]
    # whole: the planner's prefix holds the import block (maybe cut inside it) and the cursor
    whole = split >= 0 and prefix.endswith(between) and (head.endswith(anchor) or anchor.endswith(head))
    if not whole or len(between) > max_between_chars:
        cut = max(offset, -(-(prefix_end - max_between_chars) // QUANTUM_CHARS) * QUANTUM_CHARS)
        if cut > offset:
            line_start = doc_text.find("\n", cut - 1) + 1
            cut = line_start if 0 < line_start <= prefix_end else cut
        between = doc_text[cut:prefix_end]
        if not prefix.endswith(between):
            return None
        head_start = doc_text.rfind("\n", 0, max(0, offset - HEADER_CHARS)) + 1
        head = doc_text[head_start:offset]
    pieces = [head, between, *request.pieces[1:]]
    slots = [Slot(max_tokens, single_line=True), *request.slots]
    return CompanionSlot(offset, InfillRequest(pieces, slots, request.language))

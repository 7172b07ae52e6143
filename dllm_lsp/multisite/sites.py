"""Several sites of one document, masked together and filled by one denoising run.

A Site is a range of the document text the model rewrites. `joint_request` lays the
document out as pieces and slots; `settle` checks each filled site with tree-sitter (and, for
Python, with CPython's own parser) and keeps the original text wherever the model's text would
break the parse or leave the node the site belongs to, so applying the outcome never makes the
file worse.
"""
from __future__ import annotations

import ast
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dllm_lsp.engine.types import InfillRequest, Slot
from dllm_lsp.planner.lines import detect_indent_unit, indent_width, leading_ws, line_break_near

from dllm_lsp.syntax.nodes import ancestors
from dllm_lsp.syntax.snapshot import Snapshot

SiteSource = Literal["model", "kept", "rename"]

# tree-sitter-python accepts text CPython refuses (a block with no statement, `False.` before a
# line break, an unexpected indent), so a Python fill is also compiled (to an AST only: nothing
# runs). Compiling costs about 1 us a character: files up to this size are compiled whole...
WHOLE_FILE_COMPILE_CHARS = 100_000
# ...larger ones only in the top-level statements the fill touches, and not at all when those
# are larger than this (a module that is one giant class): the tree-sitter checks still hold.
MAX_COMPILE_CHARS = 500_000


@dataclass(frozen=True)
class Site:
    """Text [start, end) of the document (string offsets) to be filled by the model."""

    start: int
    end: int
    label: str
    single_line: bool
    max_tokens: int
    indent: str = ""                  # indentation of the site's line: later lines of a fill use it
    owner_type: str | None = None     # type of the node that must still enclose the fill
    owner_start: int | None = None    # start offset of that node (before any fill)
    outer_start: int | None = None    # start of the owner's parent: a block may grow back to it

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"site range [{self.start}, {self.end}) is invalid")
        if self.max_tokens < 1:
            raise ValueError("a site needs room for at least one token")


@dataclass(frozen=True)
class Outcome:
    """What happens at one site: `new_text` replaces [start, end) (equal to the old text if kept)."""

    start: int
    end: int
    new_text: str
    label: str
    source: SiteSource
    reason: str = ""                  # why a model fill was not used

    @property
    def changes_text(self) -> bool:
        return self.source != "kept"


def check_sites(text: str, sites: Sequence[Site]) -> list[Site]:
    """The sites in document order; overlapping sites or sites outside the text are an error."""
    ordered = sorted(sites, key=lambda s: (s.start, s.end))
    previous_end = 0
    for site in ordered:
        if site.end > len(text):
            raise ValueError(f"site [{site.start}, {site.end}) is outside the document (length {len(text)})")
        if site.start < previous_end:
            raise ValueError(f"sites overlap at offset {site.start}")
        previous_end = site.end
    return ordered


def joint_request(text: str, sites: Sequence[Site], language: str | None = None,
                  heal_blanks: bool = False, heal_before: bool = False) -> InfillRequest:
    """The document with every site masked: pieces[i] is the text between site i-1 and site i.
    `language`: the canonical language name (InfillRequest.language). `heal_blanks`: each piece
    ends before the spaces and tabs that precede its site on the site's line, which the model
    then writes itself (token healing, as the completion planner does: planner/spans.py
    healed_blanks); `shape_fill` drops them from its text again, and the document keeps its own.
    `heal_before`: each piece may give its last token back to its slot where that is punctuation
    the tokenizer joins to what follows (`x =` before a hole: engine/token_healing.py, which takes
    it off the slot's text again)."""
    ordered = check_sites(text, sites)
    if not ordered:
        raise ValueError("a joint fill needs at least one site")
    pieces, cursor = [], 0
    for site in ordered:
        piece = text[cursor:site.start]
        if heal_blanks:
            piece = piece.rstrip(" \t")          # blanks only: a newline ends the site's line
        pieces.append(piece)
        cursor = site.end
    pieces.append(text[cursor:])
    return InfillRequest(pieces, [Slot(s.max_tokens, s.single_line, heal_before=heal_before) for s in ordered],
                         language)


def shape_fill(raw: str, site: Site, following: str = "", newline: str = "\n", unit: str = "    ") -> str:
    """The model's slot text made ready to insert: no trailing blanks, one line for one-line
    sites, later lines re-based on the site's indent and ended with the file's line break
    (`newline`), and no `;` doubled with the one that already follows the site.

    Later lines keep their nesting relative to the fill's first line (whose blanks the model
    writes under healWhitespace; without them it stands at the site's indent), with the model's
    indent step written as the file's `unit`: a model that nests with 4 spaces in a tab-indented
    file gets tabs. A line above the first line's level is clamped to the site's indent, so no
    line leaves the site's block. (Every later line used to be forced to the site's indent:
    a loop's body landed on the loop's own level, an empty block CPython refuses.)"""
    text = raw.replace("\r\n", "\n").rstrip()
    if following.startswith(";") and text.endswith(";"):
        text = text[:-1].rstrip()
    if site.single_line:
        return text.split("\n", 1)[0].strip()
    lines = text.lstrip("\n").split("\n")
    base = indent_width(leading_ws(lines[0]) or site.indent)
    depths = [indent_width(leading_ws(line)) - base for line in lines[1:] if line.strip()]
    steps = [d for d in depths if 1 < d <= 8]
    step = min(steps) if steps else indent_width(unit)   # the model's indent step
    shaped = [lines[0].lstrip()]
    for line in lines[1:]:
        if line.strip():
            blanks = leading_ws(line)
            levels, extra = divmod(max(0, indent_width(blanks) - base), step)
            line = site.indent + unit * levels + " " * extra + line[len(blanks):]
        shaped.append(line)
    return newline.join(shaped)


def settle(
    text: str,
    language_id: str,
    sites: Sequence[Site],
    slot_texts: Sequence[str],
    tree=None,
) -> list[Outcome]:
    """One outcome per site, in document order. A site takes the model's text only when the
    file with it parses with no more errors than without it and the site's owner node still
    encloses it; otherwise the original text stays. `tree`, when given, is the tree of `text`."""
    ordered = check_sites(text, sites)
    if len(slot_texts) != len(ordered):
        raise ValueError(f"{len(slot_texts)} slot texts for {len(ordered)} sites")
    accepted: list[Outcome] = []
    current = Snapshot.parse(text, language_id, tree)
    python = current.language == "python"
    # whether the file compiled before any fill; accepted fills keep it so (a file that does not
    # compile yet is left to the tree-sitter checks: there is no "before" to keep)
    whole = len(text) <= WHOLE_FILE_COMPILE_CHARS
    compiled = python and whole and compiles(text)
    outcomes = []
    for site, raw in zip(ordered, slot_texts):
        original = text[site.start:site.end]
        unit = "\t" if "\t" in site.indent else "    "
        if not site.single_line:
            unit = detect_indent_unit(text, site.start, unit)
        fill = shape_fill(raw, site, text[site.end:site.end + 1], line_break_near(text, site.start), unit)
        reason = check_fill(fill, original)
        if reason is None and current.tree is not None:
            candidate_edits = accepted + [Outcome(site.start, site.end, fill, site.label, "model")]
            at = shifted(site.start, accepted)   # where the site is in the current text
            candidate = current.reparsed(apply_outcomes(text, candidate_edits), at, at + len(original), at + len(fill))
            reason = syntax_problem(current, candidate, site, candidate_edits)
            if reason is None and python:
                reason = python_problem(current, candidate, at, len(original), len(fill), whole, compiled)
            if reason is None:
                current = candidate
        if reason is None:
            outcome = Outcome(site.start, site.end, fill, site.label, "model")
            accepted.append(outcome)
        else:
            outcome = Outcome(site.start, site.end, original, site.label, "kept", reason)
        outcomes.append(outcome)
    return outcomes


def check_fill(fill: str, original: str) -> str | None:
    if not fill.strip():
        return "the model left the site empty"
    if fill == original:
        return "the model wrote the original text"
    return None


def syntax_problem(before: Snapshot, after: Snapshot, site: Site, edits: Sequence[Outcome]) -> str | None:
    if after.error_count() > before.error_count():
        return "the filled text does not parse"
    if site.owner_type is None or site.owner_start is None:
        return None
    start = shifted(site.start, edits)
    end = start + len(edits[-1].new_text)
    owner_start = shifted(site.owner_start, edits)
    # an earlier fill may have turned a comment before the block's first statement into code,
    # so the block may now start earlier, but not before the node that holds it
    outer_start = shifted(site.outer_start, edits) if site.outer_start is not None else owner_start
    node = after.smallest_node(start, end)
    for candidate in [node, *ancestors(node)]:
        if candidate.type == site.owner_type and outer_start <= after.start(candidate) <= owner_start:
            return None
    return f"the filled text leaves its {site.owner_type}"


def compiles(source: str) -> bool:
    """Whether CPython parses `source` (compiled to an AST only: nothing is executed)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # SyntaxWarning/DeprecationWarning of the user's own code
            compile(source, "<fill>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True


def top_level_span(source: Snapshot, start: int, end: int) -> tuple[int, int]:
    """[start, end) of the whole lines of the top-level statements that overlap [start, end]."""
    first = last = None
    for child in source.root.children:
        child_start, child_end = source.start(child), source.end(child)
        if child_end < start:
            continue
        if child_start > end:
            break
        first = child_start if first is None else first
        last = child_end
    first = start if first is None else min(first, start)
    last = end if last is None else max(last, end)
    line_start = source.text.rfind("\n", 0, first) + 1
    line_end = source.text.find("\n", last)
    return line_start, len(source.text) if line_end == -1 else line_end


def python_problem(before: Snapshot, after: Snapshot, at: int, old_length: int, new_length: int,
                   whole: bool, compiled_whole: bool) -> str | None:
    """Why CPython refuses the file with the fill at [at, at + new_length) of `after`, when it
    accepted `before` (the fill replaced [at, at + old_length) of it); None when it does not.
    A small file is compiled whole (`whole`; `compiled_whole`: it compiled before any fill); in a
    larger one only the top-level statements around the site are, before and after the fill."""
    if whole:
        ok_before, source_after = compiled_whole, after.text
    else:
        start, end = top_level_span(before, at, at + old_length)
        if end - start > MAX_COMPILE_CHARS:
            return None
        ok_before = compiles(before.text[start:end])
        start, end = top_level_span(after, at, at + new_length)
        source_after = after.text[start:end]
        if len(source_after) > MAX_COMPILE_CHARS:
            return None
    if ok_before and not compiles(source_after):
        return "the filled text does not compile (Python)"
    return None


def shifted(offset: int, edits: Sequence[Outcome]) -> int:
    """Where `offset` of the original text lands once `edits` (ending at or before it) are applied."""
    delta = 0
    for edit in edits:
        if edit.start < offset and edit.end <= offset:
            delta += len(edit.new_text) - (edit.end - edit.start)
    return offset + delta


def apply_outcomes(text: str, outcomes: Sequence[Outcome]) -> str:
    """The text with every outcome applied (outcomes must not overlap)."""
    parts, cursor = [], 0
    for outcome in sorted(outcomes, key=lambda o: o.start):
        parts.append(text[cursor:outcome.start])
        parts.append(outcome.new_text)
        cursor = outcome.end
    parts.append(text[cursor:])
    return "".join(parts)

"""Several sites of one document, masked together and filled by one denoising run.

A Site is a range of the document text the model rewrites. `joint_request` lays the
document out as pieces and slots; `settle` checks each filled site with tree-sitter and
keeps the original text wherever the model's text would break the parse or leave the
node the site belongs to, so applying the outcome never makes the file worse.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dllm_lsp.engine.types import InfillRequest, Slot
from dllm_lsp.planner.lines import line_break_near

from dllm_lsp.syntax.nodes import ancestors
from dllm_lsp.syntax.snapshot import Snapshot

SiteSource = Literal["model", "kept", "rename"]


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


def shape_fill(raw: str, site: Site, following: str = "", newline: str = "\n") -> str:
    """The model's slot text made ready to insert: no trailing blanks, one line for one-line
    sites, later lines indented at least as deep as the site itself and ended with the file's
    line break (`newline`), and no `;` doubled with the one that already follows the site."""
    text = raw.replace("\r\n", "\n").rstrip()
    if following.startswith(";") and text.endswith(";"):
        text = text[:-1].rstrip()
    if site.single_line:
        return text.split("\n", 1)[0].strip()
    lines = text.lstrip("\n").split("\n")
    shaped = [lines[0].lstrip()]
    for line in lines[1:]:
        if line.strip() and not line.startswith(site.indent):
            line = site.indent + line.lstrip()
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
    outcomes = []
    for site, raw in zip(ordered, slot_texts):
        original = text[site.start:site.end]
        fill = shape_fill(raw, site, text[site.end:site.end + 1], line_break_near(text, site.start))
        reason = check_fill(fill, original)
        if reason is None and current.tree is not None:
            candidate_edits = accepted + [Outcome(site.start, site.end, fill, site.label, "model")]
            at = shifted(site.start, accepted)   # where the site is in the current text
            candidate = current.reparsed(apply_outcomes(text, candidate_edits), at, at + len(original), at + len(fill))
            reason = syntax_problem(current, candidate, site, candidate_edits)
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

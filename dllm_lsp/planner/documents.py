"""A document's text and its tree-sitter tree, kept in step edit by edit.

Offsets given to and returned from this module are Python string indices (code points);
tree-sitter works in UTF-8 bytes and (row, byte column) points, so every edit is converted.
Each edit reparses incrementally (`tree.edit` then `parser.parse(new, old_tree)`), so a keystroke
in a large file only re-lexes the changed region. A tree once handed out is never mutated: edits
work on a copy, so a plan made before an edit still sees the tree of the text it was made from.
"""
from __future__ import annotations

from dataclasses import dataclass

import tree_sitter

from .languages import language_name, normalize_language_id, parser_for

# Beyond this size the document is kept as text only and planned by line rules: a first parse
# of tens of megabytes would stall the server for seconds.
MAX_TREE_BYTES = 8_000_000


@dataclass(frozen=True)
class DocumentSnapshot:
    """The text, its UTF-8 bytes and its tree (None: line rules) at one version of a document."""

    text: str
    data: bytes
    tree: tree_sitter.Tree | None
    language_id: str
    is_ascii: bool

    @property
    def language(self) -> str | None:
        return language_name(self.language_id) if self.tree is not None else None

    def byte_offset(self, offset: int) -> int:
        if self.is_ascii:
            return offset
        return utf8_len(self.text[:offset])

    def point(self, offset: int) -> tuple[int, int]:
        """(row, UTF-8 byte column) of a string offset, as tree-sitter counts positions."""
        row = self.text.count("\n", 0, offset)
        line_start = self.text.rfind("\n", 0, offset) + 1
        column = offset - line_start if self.is_ascii else utf8_len(self.text[line_start:offset])
        return row, column


def utf8_len(text: str) -> int:
    # surrogatepass: a lone surrogate (a client's broken UTF-16) must not crash the planner
    return len(text.encode("utf-8", errors="surrogatepass"))


def end_point(start: tuple[int, int], inserted: str) -> tuple[int, int]:
    """The point reached after inserting `inserted` at `start`."""
    newlines = inserted.count("\n")
    if newlines == 0:
        return start[0], start[1] + utf8_len(inserted)
    tail = inserted[inserted.rfind("\n") + 1:]
    return start[0] + newlines, utf8_len(tail)


def edited_tree(snapshot: DocumentSnapshot, start: int, end: int, new_text: str) -> tree_sitter.Tree:
    """A copy of the snapshot's tree with the edit [start, end) -> new_text recorded, ready to be
    passed as old_tree to an incremental parse. The snapshot's own tree is left untouched."""
    assert snapshot.tree is not None
    start_byte = snapshot.byte_offset(start)
    old_end_byte = start_byte + utf8_len(snapshot.text[start:end])
    start_point = snapshot.point(start)
    old_end_point = end_point(start_point, snapshot.text[start:end])
    tree = snapshot.tree.copy()
    tree.edit(
        start_byte=start_byte,
        old_end_byte=old_end_byte,
        new_end_byte=start_byte + utf8_len(new_text),
        start_point=start_point,
        old_end_point=old_end_point,
        new_end_point=end_point(start_point, new_text),
    )
    return tree


def _parse(language_id: str, data: bytes, old_tree: tree_sitter.Tree | None = None) -> tree_sitter.Tree | None:
    parser = parser_for(language_id)
    if parser is None or len(data) > MAX_TREE_BYTES:
        return None
    return parser.parse(data, old_tree) if old_tree is not None else parser.parse(data)


class ParsedDocument:
    """Text plus tree (None for languages without a grammar and for huge files)."""

    def __init__(self, text: str, language_id: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"document text must be a string, got {type(text).__name__}")
        language_id = normalize_language_id(language_id)
        data = text.encode("utf-8", errors="surrogatepass")
        self._snapshot = DocumentSnapshot(text, data, _parse(language_id, data), language_id, text.isascii())

    @property
    def snapshot(self) -> DocumentSnapshot:
        return self._snapshot

    @property
    def text(self) -> str:
        return self._snapshot.text

    @property
    def tree(self) -> tree_sitter.Tree | None:
        return self._snapshot.tree

    @property
    def language_id(self) -> str:
        return self._snapshot.language_id

    @property
    def language(self) -> str | None:
        """Canonical grammar name used for this document, None when planned by line rules."""
        return self._snapshot.language

    def edit(self, start: int, end: int, new_text: str) -> None:
        """Replace text[start:end] with new_text and reparse incrementally."""
        old = self._snapshot
        if not isinstance(new_text, str):
            raise TypeError(f"edit text must be a string, got {type(new_text).__name__}")
        if not (isinstance(start, int) and isinstance(end, int)) or not 0 <= start <= end <= len(old.text):
            raise ValueError(f"edit range [{start}, {end}) is outside the document (length {len(old.text)})")
        text = old.text[:start] + new_text + old.text[end:]
        start_byte = old.byte_offset(start)
        old_end_byte = old.byte_offset(end)
        data = old.data[:start_byte] + new_text.encode("utf-8", errors="surrogatepass") + old.data[old_end_byte:]
        is_ascii = old.is_ascii and new_text.isascii() if old.is_ascii else text.isascii()
        old_tree = edited_tree(old, start, end, new_text) if old.tree is not None else None
        self._snapshot = DocumentSnapshot(text, data, _parse(old.language_id, data, old_tree), old.language_id,
                                          is_ascii)

    def __repr__(self) -> str:
        return f"ParsedDocument({self.language_id!r}, {len(self.text)} chars, tree={'yes' if self.tree else 'no'})"

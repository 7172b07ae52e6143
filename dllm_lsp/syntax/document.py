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
MAX_TREE_BYTES = 2_000_000


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
        return byte_offset(self.text, offset, self.is_ascii)

    def point(self, offset: int) -> tuple[int, int]:
        return point(self.text, offset, self.is_ascii)


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


def byte_offset(text: str, offset: int, is_ascii: bool) -> int:
    return offset if is_ascii else utf8_len(text[:offset])


def point(text: str, offset: int, is_ascii: bool) -> tuple[int, int]:
    """(row, UTF-8 byte column) of a string offset, as tree-sitter counts positions."""
    row = text.count("\n", 0, offset)
    line_start = text.rfind("\n", 0, offset) + 1
    return row, (offset - line_start if is_ascii else utf8_len(text[line_start:offset]))


def record_edit(tree: tree_sitter.Tree, text: str, is_ascii: bool, start: int, end: int, new_text: str) -> None:
    """Tell `tree` (in place) that text[start:end] became new_text, so the next parse reuses the
    rest of it. `text` is the text before the edit."""
    start_byte = byte_offset(text, start, is_ascii)
    start_point = point(text, start, is_ascii)
    tree.edit(
        start_byte=start_byte,
        old_end_byte=start_byte + utf8_len(text[start:end]),
        new_end_byte=start_byte + utf8_len(new_text),
        start_point=start_point,
        old_end_point=end_point(start_point, text[start:end]),
        new_end_point=end_point(start_point, new_text),
    )


def edited_tree(snapshot: DocumentSnapshot, start: int, end: int, new_text: str) -> tree_sitter.Tree:
    """A copy of the snapshot's tree with the edit [start, end) -> new_text recorded, ready to be
    passed as old_tree to an incremental parse. The snapshot's own tree is left untouched."""
    assert snapshot.tree is not None
    tree = snapshot.tree.copy()
    record_edit(tree, snapshot.text, snapshot.is_ascii, start, end, new_text)
    return tree


def _parse(language_id: str, data: bytes, old_tree: tree_sitter.Tree | None = None) -> tree_sitter.Tree | None:
    parser = parser_for(language_id)
    if parser is None or len(data) > MAX_TREE_BYTES:
        return None
    return parser.parse(data, old_tree) if old_tree is not None else parser.parse(data)


class ParsedDocument:
    """Text plus tree (None for languages without a grammar and for huge files).

    Each edit is recorded on the tree and reparsed incrementally at once; edit(..., reparse=False)
    leaves the parse to the next access of the tree, so a batch of changes costs one parse.
    """

    def __init__(self, text: str, language_id: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"document text must be a string, got {type(text).__name__}")
        self._language_id = normalize_language_id(language_id)
        self._text = text
        self._data = text.encode("utf-8", errors="surrogatepass")
        self._is_ascii = text.isascii()
        self._pending: tree_sitter.Tree | None = None   # our private edited copy, awaiting a parse
        self._snapshot: DocumentSnapshot | None = DocumentSnapshot(
            text, self._data, _parse(self._language_id, self._data), self._language_id, self._is_ascii)
        self._last_tree = self._snapshot.tree

    @property
    def snapshot(self) -> DocumentSnapshot:
        if self._snapshot is None:
            tree = _parse(self._language_id, self._data, self._pending)
            self._pending = None
            self._last_tree = tree
            self._snapshot = DocumentSnapshot(self._text, self._data, tree, self._language_id, self._is_ascii)
        return self._snapshot

    @property
    def text(self) -> str:
        return self._text

    @property
    def tree(self) -> tree_sitter.Tree | None:
        return self.snapshot.tree

    @property
    def language_id(self) -> str:
        return self._language_id

    @property
    def language(self) -> str | None:
        """Canonical grammar name used for this document, None when planned by line rules."""
        return self.snapshot.language

    def edit(self, start: int, end: int, new_text: str, reparse: bool = True) -> None:
        """Replace text[start:end] with new_text and reparse incrementally (now, or at the next
        access of the tree when reparse=False)."""
        text = self._text
        if not isinstance(new_text, str):
            raise TypeError(f"edit text must be a string, got {type(new_text).__name__}")
        if not (isinstance(start, int) and isinstance(end, int)) or not 0 <= start <= end <= len(text):
            raise ValueError(f"edit range [{start}, {end}) is outside the document (length {len(text)})")
        if self._pending is None and self._last_tree is not None:
            self._pending = self._last_tree.copy()   # trees handed out in snapshots are never mutated
        if self._pending is not None:
            record_edit(self._pending, text, self._is_ascii, start, end, new_text)
        start_byte = byte_offset(text, start, self._is_ascii)
        end_byte = start_byte + utf8_len(text[start:end])
        self._text = text[:start] + new_text + text[end:]
        self._data = self._data[:start_byte] + new_text.encode("utf-8", errors="surrogatepass") + self._data[end_byte:]
        self._is_ascii = new_text.isascii() if self._is_ascii else self._text.isascii()
        self._snapshot = None
        if reparse:
            self.snapshot   # noqa: B018 - parse now, so a request right after finds the tree ready

    def __repr__(self) -> str:
        return f"ParsedDocument({self._language_id!r}, {len(self._text)} chars)"

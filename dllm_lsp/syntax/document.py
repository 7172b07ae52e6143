"""A document kept in step with its edits: text plus tree-sitter tree, reparsed incrementally.

Each edit reparses incrementally (`tree.edit` then `parser.parse(new, old_tree)`), so a keystroke
in a large file only re-lexes the changed region. A tree once handed out in a Snapshot is never
mutated: edits work on a copy, so a plan made before an edit still sees the tree of the text it
was made from.
"""
from __future__ import annotations

import tree_sitter

from .languages import normalize_language_id
from .snapshot import Snapshot, byte_offset, encode, parse, parser_edit, parser_text, record_edit, utf8_len


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
        self._parser_text = parser_text(text)   # the same object when the text has no `\r`
        self._data = encode(self._parser_text)
        self._is_ascii = text.isascii()
        self._pending: tree_sitter.Tree | None = None   # our private edited copy, awaiting a parse
        self._snapshot: Snapshot | None = Snapshot(
            text, self._data, parse(self._language_id, self._data), self._language_id, self._is_ascii)
        self._last_tree = self._snapshot.tree

    @property
    def snapshot(self) -> Snapshot:
        if self._snapshot is None:
            tree = parse(self._language_id, self._data, self._pending)
            self._pending = None
            self._last_tree = tree
            self._snapshot = Snapshot(self._text, self._data, tree, self._language_id, self._is_ascii)
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
        at, piece = parser_edit(text, start, end, new_text)   # [at, end) -> piece in the parser's text
        if self._pending is not None:
            record_edit(self._pending, self._parser_text, self._is_ascii, at, end, piece)
        start_byte = byte_offset(text, at, self._is_ascii)
        end_byte = start_byte + utf8_len(text[at:end])
        self._text = text[:start] + new_text + text[end:]
        self._parser_text = self._text if self._parser_text is text and "\r" not in new_text \
            else self._parser_text[:at] + piece + self._parser_text[end:]
        self._data = self._data[:start_byte] + encode(piece) + self._data[end_byte:]
        self._is_ascii = new_text.isascii() if self._is_ascii else self._text.isascii()
        self._snapshot = None
        if reparse:
            self.snapshot   # noqa: B018 - parse now, so a request right after finds the tree ready

    def __repr__(self) -> str:
        return f"ParsedDocument({self._language_id!r}, {len(self._text)} chars)"

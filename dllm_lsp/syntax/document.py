"""A document kept in step with its edits: text plus tree-sitter tree, reparsed incrementally.

Each edit is recorded on the tree at once (`Tree.edit`, cheap) and the reparse
(`parser.parse(new, old_tree)`) only re-lexes the changed region. A small document is reparsed
right away; a large one's snapshot is handed out unparsed and parsed when its tree is first read
(the server starts that off the event loop at once: docs/architecture.md, "Big documents"). A
tree once handed out in a Snapshot is never mutated: edits work on a copy, so a plan made before
an edit still sees the tree of the text it was made from.
"""
from __future__ import annotations

import threading

import tree_sitter

from .languages import normalize_language_id
from .snapshot import Snapshot, TreeSlot, byte_offset, encode, input_edit, parser_edit, parser_text, utf8_len

# Documents up to this many bytes are parsed where they are edited, at once: their first parse
# costs ~17 ms (a 64 KiB Python file on this 2-core CPU; tree-sitter-python reads ~4 MB/s) and a
# keystroke's reparse ~0.1 ms, less than handing the parse to a thread. Larger ones are parsed
# when their tree is first read, which the server does in a worker thread.
SYNC_PARSE_BYTES = 64 * 1024


class ParsedDocument:
    """Text plus tree (None for languages without a grammar and for huge files).

    Each edit is recorded for the next parse; edit(..., reparse=False) leaves even the snapshot
    to the next access, so a batch of changes costs one parse.
    """

    def __init__(self, text: str, language_id: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"document text must be a string, got {type(text).__name__}")
        self._language_id = normalize_language_id(language_id)
        self._text = text
        self._parser_text = parser_text(text)   # the same object when the text has no `\r`
        self._data = encode(self._parser_text)
        self._is_ascii = text.isascii()
        self._lock = threading.Lock()            # one parse at a time of this document's versions
        self._base: TreeSlot | None = None       # the tree slot of the last snapshot made
        self._edits: list[dict] = []             # Tree.edit arguments of the edits since then
        self._snapshot: Snapshot | None = None
        self.snapshot   # noqa: B018 - a small document is parsed now

    @property
    def snapshot(self) -> Snapshot:
        """The current version; its tree is parsed already when the document is small, else when
        first read (`Snapshot.tree`, in whichever thread reads it; `pending` says whether)."""
        if self._snapshot is None:
            slot = TreeSlot(self._language_id, self._data, self._base, tuple(self._edits), self._lock)
            self._base, self._edits = slot, []
            if len(self._data) <= SYNC_PARSE_BYTES:
                slot.resolve(chunked=False, wait=False)
            self._snapshot = Snapshot(self._text, self._data, slot, self._language_id, self._is_ascii)
        return self._snapshot

    @property
    def pending(self) -> TreeSlot | None:
        """The current snapshot's tree slot while it is still to be parsed, else None."""
        source = self.snapshot.source
        return source if isinstance(source, TreeSlot) and not source.done else None

    @property
    def last_slot(self) -> TreeSlot | None:
        """The tree slot of the last snapshot made (read from any thread: no snapshot is made)."""
        return self._base

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
        """Replace text[start:end] with new_text, recording the edit for an incremental reparse:
        now (small documents) or when the tree is read, and with reparse=False not even the
        snapshot is made until it is asked for."""
        text = self._text
        if not isinstance(new_text, str):
            raise TypeError(f"edit text must be a string, got {type(new_text).__name__}")
        if not (isinstance(start, int) and isinstance(end, int)) or not 0 <= start <= end <= len(text):
            raise ValueError(f"edit range [{start}, {end}) is outside the document (length {len(text)})")
        at, piece = parser_edit(text, start, end, new_text)   # [at, end) -> piece in the parser's text
        if self._base is not None and self._base.has_tree:   # else the next parse starts afresh anyway
            self._edits.append(input_edit(self._parser_text, self._is_ascii, at, end, piece))
        start_byte = byte_offset(text, at, self._is_ascii)
        end_byte = start_byte + utf8_len(text[at:end])
        self._text = text[:start] + new_text + text[end:]
        self._parser_text = self._text if self._parser_text is text and "\r" not in new_text \
            else self._parser_text[:at] + piece + self._parser_text[end:]
        self._data = self._data[:start_byte] + encode(piece) + self._data[end_byte:]
        self._is_ascii = new_text.isascii() if self._is_ascii else self._text.isascii()
        self._snapshot = None
        if reparse:
            self.snapshot   # noqa: B018 - a small document is reparsed now, ready for a request

    def __repr__(self) -> str:
        return f"ParsedDocument({self._language_id!r}, {len(self._text)} chars)"

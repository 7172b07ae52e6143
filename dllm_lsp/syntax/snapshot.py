"""One version of a document: its text, UTF-8 bytes and tree, with string-offset geometry.

Offsets given to and returned from a Snapshot are Python string indices (code points);
tree-sitter works in UTF-8 bytes and (row, byte column) points, so every question converts.
A snapshot is immutable: a plan made on it keeps seeing the text and tree it was made from,
whatever the document does afterwards.
"""
from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass

import tree_sitter

from .languages import language_name, normalize_language_id, parser_for
from .nodes import count_errors

# Beyond this size the document is kept as text only and planned by line rules: a first parse
# of tens of megabytes would stall the server for seconds.
MAX_TREE_BYTES = 2_000_000


_LONE_CR = re.compile(r"\r(?!\n)")


def encode(text: str) -> bytes:
    # surrogatepass: a lone surrogate (a client's broken UTF-16) must not crash the server
    return text.encode("utf-8", errors="surrogatepass")


def has_lone_cr(text: str) -> bool:
    """Whether some line of `text` ends in a CR not followed by LF (classic Mac line ends)."""
    return "\r" in text and _LONE_CR.search(text) is not None


def parser_text(text: str) -> str:
    """The text as the grammars are given it: each lone `\r` replaced by `\n`.

    LSP and editors end a line at `\r\n`, `\r` or `\n`; the grammars' scanners end one at `\n`
    only, so a file with classic Mac line ends parsed as one line (Python: a `return` outside its
    function, and a rename that missed it). The replacement has the same length in characters and
    in bytes, so every offset and node range is the same in both texts."""
    return _LONE_CR.sub("\n", text) if "\r" in text else text


def parser_edit(text: str, start: int, end: int, new_text: str) -> tuple[int, str]:
    """The edit text[start:end] -> new_text as the parser's text sees it: (start, new piece),
    where the piece replaces parser_text(text)[start:end]. A `\r` right before the edit may turn
    from a CRLF's half into a lone one or back (its `\n` deleted or typed), so the edit then
    starts at it; the piece's own last `\r` is lone or not by the character after the edit."""
    if start > 0 and text[start - 1] == "\r":
        start, new_text = start - 1, "\r" + new_text
    elif "\r" not in new_text:
        return start, new_text
    return start, parser_text(new_text + text[end:end + 1])[:len(new_text)]


def utf8_len(text: str) -> int:
    return len(encode(text))


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
    rest of it. `text` is the parser's text before the edit, and `new_text` the parser's piece
    (parser_edit)."""
    tree.edit(**input_edit(text, is_ascii, start, end, new_text))


# py-tree-sitter (0.26) holds the GIL for a whole parse of a byte string: while a thread parsed a
# 1.3 M-character file, the main thread ran once in ~260 ms. Given the text through a read
# callback instead, the parse comes back to Python once per chunk, where the interpreter hands the
# GIL to a waiting thread (every 5 ms, sys.getswitchinterval): the main thread then ran 30-37
# times in a parse of the same length (tests/syntax/measure_parse_off_loop.py). Parses done off
# the loop read this way.
READ_CHUNK_BYTES = 4096


def parse(language_id: str, data: bytes, old_tree: tree_sitter.Tree | None = None,
          chunked: bool = False) -> tree_sitter.Tree | None:
    """The tree of `data`, None for languages without a grammar and for huge files. `chunked`:
    read through a callback, so that other threads run during the parse (READ_CHUNK_BYTES)."""
    parser = parser_for(language_id)
    if not will_have_tree(language_id, data):
        return None
    assert parser is not None
    source = _chunks(data) if chunked else data
    return parser.parse(source, old_tree) if old_tree is not None else parser.parse(source)


def _chunks(data: bytes):
    def read(offset: int, _point: tuple[int, int]) -> bytes:
        return data[offset:offset + READ_CHUNK_BYTES]
    return read


def will_have_tree(language_id: str, data: bytes) -> bool:
    """Whether parse() gives `data` a tree (a grammar, and not too big), known without parsing."""
    return parser_for(language_id) is not None and len(data) <= MAX_TREE_BYTES


def input_edit(text: str, is_ascii: bool, start: int, end: int, new_text: str) -> dict:
    """Tree.edit's arguments for text[start:end] -> new_text; `text` is the parser's text before
    the edit, `new_text` the parser's piece (parser_edit)."""
    start_byte = byte_offset(text, start, is_ascii)
    start_point = point(text, start, is_ascii)
    return dict(start_byte=start_byte, old_end_byte=start_byte + utf8_len(text[start:end]),
                new_end_byte=start_byte + utf8_len(new_text), start_point=start_point,
                old_end_point=end_point(start_point, text[start:end]),
                new_end_point=end_point(start_point, new_text))


class TreeSlot:
    """The tree of one version of a document, parsed when first needed (`resolve`): from scratch,
    or incrementally from an earlier version's tree (`base`) and the edits made since (`edits`,
    Tree.edit arguments in order). A slot only ever holds the tree of its own `data`, so a
    snapshot's text and tree are always of one version, whichever thread parses it and when.

    The slots of one document share a lock: one parse at a time per document, and a request that
    needs a version the background parse is working on waits for that parse, not a second one.
    Resolving a version leaves the versions between it and its base unparsed (a burst of
    keystrokes during a long parse costs one reparse, not one each); they keep their base and
    edits, and parse themselves if a snapshot of theirs is ever read."""

    def __init__(self, language_id: str, data: bytes, base: TreeSlot | None = None,
                 edits: tuple[dict, ...] = (), lock: threading.Lock | None = None) -> None:
        self.language_id = language_id
        self.data = data
        self.has_tree = will_have_tree(language_id, data)
        self._base = base if self.has_tree else None
        self._edits = edits
        self._lock = lock or threading.Lock()
        self._done = not self.has_tree
        self._tree: tree_sitter.Tree | None = None

    @classmethod
    def of(cls, tree: tree_sitter.Tree | None, language_id: str, data: bytes) -> TreeSlot:
        """A slot holding `tree`, already parsed (the tree of exactly `data`)."""
        slot = cls(language_id, data)
        slot._tree, slot._done = tree, True
        return slot

    @property
    def done(self) -> bool:
        return self._done

    def resolve(self, chunked: bool = True, wait: bool = True) -> tree_sitter.Tree | None:
        """The tree, parsed now if it has not been (in the calling thread, under the document's
        lock). `chunked=False` parses the bytes in one call (faster for small texts, but holding
        the GIL throughout). `wait=False`: when another thread is parsing a version of this
        document, parse this one from scratch rather than wait (for small texts, on the loop)."""
        if self._done:
            return self._tree
        if not self._lock.acquire(blocking=wait):
            tree = parse(self.language_id, self.data, chunked=chunked)
            self._tree, self._base, self._edits, self._done = tree, None, (), True
            return tree
        try:
            if self._done:
                return self._tree
            # the edits from the nearest parsed ancestor, in the order they were made
            chain: list[TreeSlot] = []
            slot: TreeSlot | None = self
            while slot is not None and not slot._done:
                chain.append(slot)
                slot = slot._base
            old = None
            if slot is not None and slot._tree is not None:
                old = slot._tree.copy()   # a parsed tree may be held by snapshots: never edited
                for step in reversed(chain):
                    for edit in step._edits:
                        old.edit(**edit)
            tree = parse(self.language_id, self.data, old, chunked=chunked)
            self._tree, self._base, self._edits, self._done = tree, None, (), True
            return tree
        finally:
            self._lock.release()


def parse_errors(language_id: str, text: str) -> int:
    """ERROR and MISSING nodes in `text` parsed alone (0 for languages without a grammar)."""
    parser = parser_for(language_id)
    if parser is None:
        return 0
    return count_errors(parser.parse(encode(parser_text(text))).root_node)


@dataclass(frozen=True)
class Snapshot:
    """The text, the UTF-8 bytes the parser read (those of parser_text(text)) and its tree (None:
    no grammar, or too big) at one version.

    `source` is the tree, or a TreeSlot that parses it when `tree` is first read: an open
    document's snapshot is handed out at once and parsed off the event loop (the server's
    documents.py), and whoever reads its tree gets the tree of this text, never another's."""

    text: str
    data: bytes
    source: tree_sitter.Tree | TreeSlot | None
    language_id: str
    is_ascii: bool

    @property
    def tree(self) -> tree_sitter.Tree | None:
        source = self.source
        return source.resolve() if isinstance(source, TreeSlot) else source

    @property
    def has_tree(self) -> bool:
        """Whether `tree` is not None, known without waiting for a parse."""
        source = self.source
        return source.has_tree if isinstance(source, TreeSlot) else source is not None

    @classmethod
    def parse(cls, text: str, language_id: str, tree: tree_sitter.Tree | None = None) -> Snapshot:
        """Parse `text`; `tree`, when given, must be the tree of exactly `text` (saves a parse)."""
        if not isinstance(text, str):
            raise TypeError(f"document text must be a string, got {type(text).__name__}")
        language_id = normalize_language_id(language_id)
        data = encode(parser_text(text))
        if tree is None or parser_for(language_id) is None:
            tree = parse(language_id, data)
        return cls(text, data, tree, language_id, text.isascii())

    @property
    def language(self) -> str | None:
        """Canonical grammar name ("tsx" for typescriptreact); None when planned by line rules."""
        return language_name(self.language_id) if self.has_tree else None

    @property
    def root(self) -> tree_sitter.Node:
        if self.tree is None:
            raise ValueError(f"no tree-sitter tree for language {self.language_id!r}")
        return self.tree.root_node

    def byte(self, offset: int) -> int:
        return byte_offset(self.text, offset, self.is_ascii)

    def char(self, byte: int) -> int:
        if self.is_ascii:
            return byte
        return len(self.data[:byte].decode("utf-8", errors="surrogatepass"))

    @functools.cached_property
    def parser_text(self) -> str:
        return parser_text(self.text)

    @functools.cached_property
    def line_view(self) -> Snapshot:
        """This snapshot as its lines are read: lone CRs as LF (parser_text), with the same
        offsets and tree. The planner's and post-processing's line rules split at LF, so a
        classic-Mac file was one line to them (a line tail planned where a block body belongs)."""
        if not has_lone_cr(self.text):   # LF and CRLF files: itself
            return self
        return Snapshot(self.parser_text, self.data, self.source, self.language_id, self.is_ascii)

    def point(self, offset: int) -> tuple[int, int]:
        """(row, byte column) as the tree counts them (its rows end at lone `\r`s too)."""
        return point(self.parser_text, offset, self.is_ascii)

    def start(self, node: tree_sitter.Node) -> int:
        return self.char(node.start_byte)

    def end(self, node: tree_sitter.Node) -> int:
        end = self.char(node.end_byte)
        # The line comments of the C family, Rust, Go, Java and Python take the `\r` of a CRLF
        # (their scanners end a line at `\n`); a range up to it would split the line end, and
        # an edit over it leave a bare `\n` (a filled `# TODO`)
        if node.end_byte > node.start_byte and self.text[end - 1:end + 1] == "\r\n":
            end -= 1
        return end

    def node_text(self, node: tree_sitter.Node) -> str:
        return self.text[self.start(node):self.end(node)]

    def smallest_node(self, start: int, end: int) -> tree_sitter.Node:
        return self.root.descendant_for_byte_range(self.byte(start), self.byte(end))

    @functools.cached_property
    def _errors(self) -> int:
        return count_errors(self.tree.root_node) if self.tree is not None else 0

    def error_count(self) -> int:
        """ERROR and MISSING nodes in the whole tree (0 without one)."""
        return self._errors

    def edited_tree(self, start: int, end: int, new_text: str) -> tree_sitter.Tree:
        """A copy of the tree with the edit [start, end) -> new_text recorded, ready to be passed
        as old_tree to an incremental parse. This snapshot's own tree is left untouched."""
        assert self.tree is not None
        tree = self.tree.copy()
        start, piece = parser_edit(self.text, start, end, new_text)
        record_edit(tree, self.parser_text, self.is_ascii, start, end, piece)
        return tree

    def reparsed(self, text: str, start: int, base_end: int, text_end: int) -> Snapshot:
        """`text` parsed incrementally from this tree: the two differ only in
        self.text[start:base_end] versus text[start:text_end]. Comparing a document with its
        earlier versions so costs a small reparse per version, not a full parse."""
        if self.tree is None:
            return Snapshot.parse(text, self.language_id)
        old_tree = self.edited_tree(start, base_end, text[start:text_end])
        data = encode(parser_text(text))
        return Snapshot(text, data, parse(self.language_id, data, old_tree), self.language_id, text.isascii())

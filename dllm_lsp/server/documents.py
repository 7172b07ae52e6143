"""Parsed twins of the open documents: pygls keeps the text, this keeps tree-sitter trees
in step with it, edit by edit, so a keystroke reparses incrementally. A large document is parsed
in a worker thread, never on the event loop (docs/architecture.md, "Big documents"), and a
connection holds at most MAX_OPEN_DOCUMENTS documents of MAX_OPEN_CHARS characters in all."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.workspace import Workspace
from pygls.workspace.text_document import TextDocument

from dllm_lsp.syntax.document import SYNC_PARSE_BYTES, ParsedDocument
from dllm_lsp.syntax.snapshot import Snapshot, TreeSlot

from .errors import RequestFailed
from .positions import LspTextDocument, client_text, edit_range, plain_text

log = logging.getLogger(__name__)

T = TypeVar("T")


class LspWorkspace(Workspace):
    """pygls' workspace whose documents count lines as the client does (positions.py), and only
    the documents the client opened."""

    def get_text_document(self, doc_uri: str) -> TextDocument:
        """The open document, else an empty one that reads nothing. pygls' falls back to the file
        on the server's disk: a client's didChange for a URI it never opened made the server read
        any file by name (a FIFO hung every client, a 100 MB file was read and kept)."""
        return self._text_documents.get(unquote(doc_uri)) or self._create_text_document(doc_uri, source="")

    def update_text_document(self, text_doc: types.VersionedTextDocumentIdentifier,
                             change: types.TextDocumentContentChangeEvent) -> None:
        """A change to a document that is not open is dropped (the server's didChange handler
        logs it, or drops it quietly for a document the caps refused): pygls' raised KeyError,
        shown to the user as "Error in server" at every keystroke in a refused document."""
        if unquote(text_doc.uri) in self._text_documents:
            super().update_text_document(text_doc, change)

    def _create_text_document(self, doc_uri: str, source: str | None = None, version: int | None = None,
                              language_id: str | None = None) -> TextDocument:
        return LspTextDocument(doc_uri, source=source, version=version, language_id=language_id,
                               sync_kind=self._sync_kind, position_codec=self.position_codec)


# What one connection may hold open. A parsed document costs ~31 bytes a character in this
# process (tree-sitter's tree, the bytes it read, the text: ~410 MB of RSS for ten 1.3 M-character
# Python files opened and parsed), besides pygls' copy of the text and the edit history; without a
# cap, 60 documents of 4 Mi characters took 545 MB and a client could open them until the process
# died. 16 Mi characters is ~800 source files of a typical 20 KB, and at most ~0.5 GB of trees.
MAX_OPEN_CHARS = 16 * 1024 * 1024
# Every open document is looked at per request (cross-file snippets: the most recent first) and
# costs its fixed overheads; an editor opens the files a user has in tabs or buffers, far fewer.
MAX_OPEN_DOCUMENTS = 500

# Large documents are parsed here, off the event loop; parses come back to Python every few KB so
# the loop keeps running meanwhile (syntax/snapshot.py, READ_CHUNK_BYTES). One pool for every
# connection: its workers only start parses, and a request that needs a tree sooner parses it in
# a thread of its own pool (tree_ready), so a long parse queued here delays nobody's request.
_PARSES = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dllm-parse")
# A request that needs a large document's tree now parses it, or waits for the parse under way,
# in one of these threads (tree_ready): never in asyncio's default pool, whose few workers
# (min(32, cores + 4): 6 on a 2-core machine) plan and finish every connection's completions.
# Requests on six big documents still parsing held all six there, and a small document's
# completion waited for their parses. Bounded: what waits beyond it is big documents' requests.
_TREE_WAITS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dllm-tree-wait")


class DocumentTrees:
    """Keyed as pygls keys its documents (the URI percent-decoded): `caf%C3%A9.py` and `café.py`
    are one document to it, and were two here, each with its own text."""

    def __init__(self, max_documents: int = MAX_OPEN_DOCUMENTS, max_chars: int = MAX_OPEN_CHARS) -> None:
        self._parsed: dict[str, ParsedDocument] = {}
        self._language: dict[str, str] = {}
        self._refused: dict[str, str] = {}   # uri -> why it is not kept (the caps)
        self.max_documents = max_documents
        self.max_chars = max_chars
        self._chars = 0                      # characters of the documents kept, in all

    def open(self, uri: str, language_id: str, text: str) -> str | None:
        """Keep the document; None, or (keeping nothing of it) the reason it is refused: it would
        take this connection past MAX_OPEN_DOCUMENTS or MAX_OPEN_CHARS."""
        uri = unquote(uri)
        self.close(uri)
        text = plain_text(client_text(text))   # as pygls' document reads it (positions.py)
        if len(self._parsed) >= self.max_documents:
            return self._refuse(uri, f"{self.max_documents} documents are open on this connection, the most it keeps")
        if self._chars + len(text) > self.max_chars:
            return self._refuse(uri, self._chars_reason(len(text)))
        self._language[uri] = language_id
        self._parsed[uri] = parsed = ParsedDocument(text, language_id)   # the most recently opened or changed last
        self._chars += len(text)
        parse_soon(parsed, uri)
        return None

    def _chars_reason(self, size: int) -> str:
        cap = (f"{self.max_chars // (1024 * 1024)} Mi" if self.max_chars % (1024 * 1024) == 0
               else f"{self.max_chars:,}")
        return (f"its {size:,} characters would take the open documents of this connection past "
                f"{cap} characters ({self._chars:,} open), the most it keeps")

    def _refuse(self, uri: str, why: str) -> str:
        name = uri.rsplit("/", 1)[-1] or uri
        self._refused[uri] = reason = f"{name} is not kept: {why}; close other documents and reopen it"
        return reason

    def refused(self, uri: str) -> str | None:
        """Why the document was refused (open, or grown past the caps), else None."""
        return self._refused.get(unquote(uri))

    def close(self, uri: str) -> None:
        uri = unquote(uri)
        parsed = self._parsed.pop(uri, None)
        if parsed is not None:
            self._chars -= len(parsed.text)
        self._language.pop(uri, None)
        self._refused.pop(uri, None)

    def forget_all(self) -> None:
        """Drop every document now (a connection that has gone): their texts and trees are freed
        at once, not when the cycle collector reaches the connection's server."""
        self._parsed.clear()
        self._language.clear()
        self._refused.clear()
        self._chars = 0

    @property
    def uris(self) -> list[str]:
        return list(self._parsed)

    def change(self, uri: str, changes: list, current: TextDocument) -> str | None:
        """Mirror `changes` (already applied by pygls to `current`) onto the parsed twin. None, or
        the reason the document is no longer kept: the edit took the connection past
        MAX_OPEN_CHARS (the caller forgets it then)."""
        uri = unquote(uri)
        parsed = self._parsed.get(uri)
        if parsed is None:
            return None
        growth = len(current.source) - len(parsed.text)
        if growth > 0 and self._chars + growth > self.max_chars:
            self._chars -= len(parsed.text)
            del self._parsed[uri]
            self._language.pop(uri, None)
            return self._refuse(uri, self._chars_reason(len(current.source)))
        self._parsed[uri] = self._parsed.pop(uri)   # the most recently opened or changed last
        for change in changes:
            if isinstance(change, types.TextDocumentContentChangePartial):
                # the same offsets as LspTextDocument's edit (the plain text has its characters)
                start, end = edit_range(parsed.text, change.range, current.position_codec)
                parsed.edit(start, end, plain_text(change.text), reparse=False)
            else:
                parsed.edit(0, len(parsed.text), plain_text(client_text(change.text)), reparse=False)
        if parsed.text != current.source:
            # Expected only where an edit put a surrogate next to its other half: the client joined
            # them into one character, and the plain copy cannot tell a lone surrogate's U+FFFD
            # from the character U+FFFD. The stretch that differs is edited over, as one edit.
            start, end, insert = differing(parsed.text, current.source)
            if not any("\ufffd" in piece for piece in (parsed.text[start:end], insert)):
                log.warning("%s: the parsed copy differs from the text: edited over", uri)
            parsed.edit(start, end, insert, reparse=False)
        parsed.snapshot   # noqa: B018 - one reparse per notification, after its last edit
        self._chars += growth
        parse_soon(parsed)
        return None

    def text_of(self, uri: str) -> str | None:
        """The text of the parsed twin (before an edit is mirrored onto it: the previous version)."""
        parsed = self._parsed.get(unquote(uri))
        return parsed.text if parsed is not None else None

    def get(self, uri: str, workspace: Workspace) -> tuple[Snapshot, TextDocument, str]:
        """The document's current snapshot (text + tree), pygls' document and the language id as
        the client named it; InvalidParams if the document is not open, RequestFailed if it was refused. The tree
        of a large document may still be parsing: reading `snapshot.tree` waits for it (`await
        tree_ready(snapshot)` first), and it is always the tree of `snapshot.text`."""
        parsed = self._parsed.get(unquote(uri))
        if parsed is None:
            refused = self._refused.get(unquote(uri))
            if refused is not None:   # a valid request this server will not serve, as for a document too big
                raise RequestFailed(refused)
            raise JsonRpcInvalidParams(f"document {uri} is not open (send textDocument/didOpen first)")
        return parsed.snapshot, workspace.get_text_document(uri), self._language[unquote(uri)]

    def others(self, uri: str) -> list[tuple[str, str]]:
        """(uri, text) of the other open documents, for cross-file context snippets: the most
        recently opened or changed first (the planner looks at the first few)."""
        uri = unquote(uri)
        return [(u, p.text) for u, p in reversed(self._parsed.items()) if u != uri]


def differing(old: str, new: str) -> tuple[int, int, str]:
    """(start, end, text): `new` is `old` with old[start:end] replaced by text, the stretch as
    short as the common head and tail allow (found by halving, comparing slices at C speed)."""
    def common(a: str, b: str, tail: bool) -> int:
        lo, hi = 0, min(len(a), len(b))
        while lo < hi:
            mid = (lo + hi + 1) // 2
            same = a[len(a) - mid:] == b[len(b) - mid:] if tail else a[:mid] == b[:mid]
            lo, hi = (mid, hi) if same else (lo, mid - 1)
        return lo

    head = common(old, new, tail=False)
    tail = common(old[head:], new[head:], tail=True)
    return head, len(old) - tail, new[head:len(new) - tail]


async def tree_ready(snapshot: Snapshot) -> None:
    """Return once the snapshot's tree is parsed (at once for a small document, parsed where it
    was edited), the parse or the wait for it done in a _TREE_WAITS thread: whatever reads
    `snapshot.tree` afterwards, in asyncio's default pool or on the loop, no longer waits."""
    source = snapshot.source
    if isinstance(source, TreeSlot) and not source.done:
        await asyncio.wrap_future(_TREE_WAITS.submit(source.resolve))


async def with_tree(snapshot: Snapshot, work: Callable[..., T], *args: Any) -> T:
    """`work(*args)`, which reads `snapshot.tree`, never on the event loop for a big document: there
    it would wait for the document's parse (a second or more at 2 MB) and walk the tree while
    every client's messages waited. A document up to SYNC_PARSE_BYTES is parsed where it was
    edited, and the work on it costs less than the hop to a thread: done at once."""
    if len(snapshot.data) <= SYNC_PARSE_BYTES:
        return work(*args)
    await tree_ready(snapshot)       # in the parse waits' pool, not asyncio's default one
    return await asyncio.to_thread(work, *args)


def parse_soon(parsed: ParsedDocument, opened: str | None = None) -> Future | None:
    """Start parsing the document's current version in a worker thread, when it is not parsed
    yet (a large document); the returned future is done once that parse is (tests wait on it).
    `opened`: the URI of a document just opened, whose first parse is logged (not each keystroke's)."""
    slot = parsed.pending
    if slot is None:
        return None
    future = _PARSES.submit(_parse_if_current, parsed, slot, opened)
    future.add_done_callback(_log_failure)
    return future


def _parse_if_current(parsed: ParsedDocument, slot: TreeSlot, opened: str | None) -> None:
    # A version edited over before its turn is skipped: the next job parses the newer one, from
    # the same old tree and both edits (one reparse for a burst of keystrokes).
    if parsed.last_slot is not slot or slot.done:
        return
    start = time.perf_counter()
    slot.resolve()
    if opened is not None:
        log.info("the tree of %s (%s bytes) was ready in %.0f ms, parsed in a worker thread", opened,
                 f"{len(slot.data):,}", (time.perf_counter() - start) * 1000)


def _log_failure(future: Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("a background parse failed", exc_info=future.exception())

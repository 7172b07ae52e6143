"""Parsed twins of the open documents: pygls keeps the text, this keeps tree-sitter trees
in step with it, edit by edit, so a keystroke reparses incrementally."""
from __future__ import annotations

import logging
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.workspace import Workspace
from pygls.workspace.text_document import TextDocument

from dllm_lsp.syntax.document import ParsedDocument
from dllm_lsp.syntax.snapshot import Snapshot

from .positions import LspTextDocument, edit_range

log = logging.getLogger(__name__)


class LspWorkspace(Workspace):
    """pygls' workspace whose documents count lines as the client does (positions.py), and only
    the documents the client opened."""

    def get_text_document(self, doc_uri: str) -> TextDocument:
        """The open document, else an empty one that reads nothing. pygls' falls back to the file
        on the server's disk: a client's didChange for a URI it never opened made the server read
        any file by name (a FIFO hung every client, a 100 MB file was read and kept)."""
        return self._text_documents.get(unquote(doc_uri)) or self._create_text_document(doc_uri, source="")

    def _create_text_document(self, doc_uri: str, source: str | None = None, version: int | None = None,
                              language_id: str | None = None) -> TextDocument:
        return LspTextDocument(doc_uri, source=source, version=version, language_id=language_id,
                               sync_kind=self._sync_kind, position_codec=self.position_codec)


class DocumentTrees:
    """Keyed as pygls keys its documents (the URI percent-decoded): `caf%C3%A9.py` and `café.py`
    are one document to it, and were two here, each with its own text."""

    def __init__(self) -> None:
        self._parsed: dict[str, ParsedDocument] = {}
        self._language: dict[str, str] = {}

    def open(self, uri: str, language_id: str, text: str) -> None:
        uri = unquote(uri)
        self._language[uri] = language_id
        self._parsed.pop(uri, None)           # the most recently opened or changed last
        self._parsed[uri] = ParsedDocument(text, language_id)

    def close(self, uri: str) -> None:
        uri = unquote(uri)
        self._parsed.pop(uri, None)
        self._language.pop(uri, None)

    def change(self, uri: str, changes: list, current: TextDocument) -> None:
        """Mirror `changes` (already applied by pygls to `current`) onto the parsed twin."""
        uri = unquote(uri)
        parsed = self._parsed.get(uri)
        if parsed is None:
            return
        self._parsed[uri] = self._parsed.pop(uri)   # the most recently opened or changed last
        for index, change in enumerate(changes):
            last = index == len(changes) - 1   # one reparse per notification, after its last edit
            if isinstance(change, types.TextDocumentContentChangePartial):
                # the same offsets as LspTextDocument's edit
                start, end = edit_range(parsed.text, change.range, current.position_codec)
                parsed.edit(start, end, change.text, reparse=last)
            else:
                parsed.edit(0, len(parsed.text), change.text, reparse=last)
        if parsed.text != current.source:   # never expected: both copies took the same edits
            log.warning("%s: the parsed copy differs from the text: reparsing it", uri)
            self._parsed[uri] = ParsedDocument(current.source, self._language[uri])

    def text_of(self, uri: str) -> str | None:
        """The text of the parsed twin (before an edit is mirrored onto it: the previous version)."""
        parsed = self._parsed.get(unquote(uri))
        return parsed.text if parsed is not None else None

    def get(self, uri: str, workspace: Workspace) -> tuple[Snapshot, TextDocument, str]:
        """The document's current snapshot (text + tree), pygls' document and the language id as
        the client named it; InvalidParams if the document is not open."""
        parsed = self._parsed.get(unquote(uri))
        if parsed is None:
            raise JsonRpcInvalidParams(f"document {uri} is not open (send textDocument/didOpen first)")
        return parsed.snapshot, workspace.get_text_document(uri), self._language[unquote(uri)]

    def others(self, uri: str) -> list[tuple[str, str]]:
        """(uri, text) of the other open documents, for cross-file context snippets: the most
        recently opened or changed first (the planner looks at the first few)."""
        uri = unquote(uri)
        return [(u, p.text) for u, p in reversed(self._parsed.items()) if u != uri]

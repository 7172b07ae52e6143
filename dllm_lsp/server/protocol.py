"""pygls' protocol, answering requests whose params fail to deserialise.

Stock pygls logs such a request and never answers it, so the client waits forever; here the
client gets InvalidParams naming the bad field. Also:
- an ordinary refusal (cancelled, superseded, no model loaded, invalid params) is logged in one
  line, not with pygls' full traceback;
- a document above MAX_DOCUMENT_CHARS is not tracked (no parse, no syntax tree): its requests
  get RequestFailed saying so, and the client is told once (docs/protocol.md, "Limits").
"""
from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.workspace import Workspace

from .auth import SERVER_NOT_INITIALIZED
from .client_requests import ClientRequests
from .documents import LspWorkspace
from .params import describe

log = logging.getLogger(__name__)


class _QuietRoutine(logging.Filter):
    """Two of pygls' log records say nothing worth a line. It logs every message whose params fail
    to deserialise with a screen of traceback before raising; DllmProtocol.structure_message
    answers those itself (InvalidParams) and logs one line. And it warns of every $/cancelRequest
    for a request already answered, which editors send all the time (an inline completion
    cancelled as the next key is typed, its answer on the way): a warning per keystroke."""

    QUIET = ("Unable to deserialize message", "Cancel notification for unknown message id")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(self.QUIET))


logging.getLogger("pygls.protocol.json_rpc").addFilter(_QuietRoutine())

_ANSWERED = object()   # a request already answered with an error while being read

MAX_DOCUMENT_CHARS = 4 * 1024 * 1024   # larger documents get no completions (a clear message instead)
REQUEST_FAILED = -32803
# Errors a client meets in normal use: answered, logged in one line.
ORDINARY_ERRORS = {-32800, -32801, -32802, REQUEST_FAILED, -32602}


class DllmProtocol(LanguageServerProtocol):
    def __init__(self, server, converter) -> None:
        super().__init__(server, converter)
        self.initialized_seen = False   # the `initialized` notification came (it is sent once)
        self.told_notebooks = False     # a notebook notification was dropped and logged
        self.client_requests = ClientRequests(self)   # our requests to the client, each with a bounded life

    def send_request(self, method: str, params: Any | None = None, callback=None, msg_id=None) -> Future:
        """Every request to the client (pygls' helpers all come here): bounded in life and in
        number, and out of pygls' table once answered or given up on (client_requests.py)."""
        return self.client_requests.send(super().send_request, method, params, callback, msg_id)

    @property
    def _workspace(self) -> Workspace | None:
        return self.__dict__.get("_lsp_workspace")

    @_workspace.setter
    def _workspace(self, workspace: Workspace | None) -> None:
        # pygls builds a plain Workspace in its initialize handler, before any document opens;
        # ours differs only in the documents it creates (LSP's line ends), so it takes over as is
        if workspace is not None and not isinstance(workspace, LspWorkspace):
            workspace.__class__ = LspWorkspace
        self.__dict__["_lsp_workspace"] = workspace

    # pygls caches these two with functools.lru_cache on the method, keyed by (self, method): its
    # class-wide cache of 128 entries kept the protocol, and through it the whole language server
    # (documents, trees, edit histories) of every TCP connection that had gone, up to ~32 of them.
    # The lookups cost next to nothing uncached.
    def get_message_type(self, method: str):
        return types.METHOD_TO_TYPES.get(method, (None,))[0]

    def get_result_type(self, method: str):
        return types.METHOD_TO_TYPES.get(method, (None, None))[1]

    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" in data and "method" in data:
                problems = describe(exc.__cause__) if exc.__cause__ is not None else str(exc)
                error = JsonRpcInvalidParams(f"invalid params for {data['method']}: {problems}")
                log.info("request %s answered -32602: %s", data["id"], error.message)
                self._send_response(data["id"], error=error.to_response_error())
                return _ANSWERED
            raise

    def handle_message(self, message) -> None:
        if (message is _ANSWERED or self.refuse_before_initialize(message) or self.refuse_unadvertised_notebook(message)
                or self.refuse_oversized(message)):
            return
        super().handle_message(message)
        if getattr(message, "method", None) == types.TEXT_DOCUMENT_DID_CHANGE:
            self.check_size(message.params.text_document.uri)

    def refuse_before_initialize(self, message) -> bool:
        """LSP: before `initialize`, a request is answered ServerNotInitialized (-32002) and a
        notification other than `exit` is dropped; a second `initialize` is refused (-32600), a
        second `initialized` dropped. (pygls served them, and its handlers failed with -32603 and
        a traceback: no workspace yet.)"""
        method = getattr(message, "method", None)
        if method == types.INITIALIZE and self._workspace is not None:
            # LSP: initialize is sent once. A second one re-initialised the workspace, and its
            # options were said to fall back to the defaults while the first ones stayed.
            self._send_response(message.id, error=JsonRpcException(
                "initialize was already received: it is sent once per connection", code=-32600).to_response_error())
            return True
        if method == types.INITIALIZED and self._workspace is not None:
            # LSP: sent once, after initialize. A second one during the model's load started a
            # second work-done progress (a second `window/workDoneProgress/create`, two begin/end
            # pairs: two "loading" notifications in the editor for one load).
            if self.initialized_seen:
                log.warning("a second initialized notification: dropped (it is sent once per connection)")
                return True
            self.initialized_seen = True
        if self._workspace is not None or method is None or method in (types.INITIALIZE, types.EXIT):
            return False
        if getattr(message, "id", None) is not None:
            self._send_response(message.id, error=JsonRpcException(
                f"{method} before initialize: send initialize first", code=SERVER_NOT_INITIALIZED).to_response_error())
        return True

    def refuse_unadvertised_notebook(self, message) -> bool:
        """Drop the notebookDocument/* notifications while the server advertises no
        notebookDocumentSync (LSP: a client sends them only to a server that does). pygls' built-in
        handlers stored every cell as an open text document, past the connection's caps
        (documents.py: MAX_OPEN_CHARS; MAX_DOCUMENT_CHARS): 27 M characters of cells were kept
        on a connection that keeps 16 Mi, and never parsed nor completed."""
        method = getattr(message, "method", None)
        if not isinstance(method, str) or not method.startswith("notebookDocument/"):
            return False
        if getattr(message, "id", None) is not None:   # LSP has no notebook requests: pygls answers them
            return False
        capabilities = getattr(self, "server_capabilities", None)   # set by pygls' initialize
        if capabilities is not None and capabilities.notebook_document_sync is not None:
            return False
        if not self.told_notebooks:   # one warning per connection, not one per cell edit
            self.told_notebooks = True
            log.warning("%s dropped: this server does not advertise notebookDocumentSync", method)
        return True

    @property
    def oversized(self) -> dict[str, int]:
        """uri -> length of the open documents above MAX_DOCUMENT_CHARS."""
        if not hasattr(self, "_oversized"):
            self._oversized: dict[str, int] = {}
        return self._oversized

    def refuse_oversized(self, message) -> bool:
        # URIs as pygls keys its documents (percent-decoded): `My%20Project/a.py` and its decoded
        # spelling are one document, whose size was looked up under the wrong key and never checked.
        method = getattr(message, "method", None)
        if method == types.TEXT_DOCUMENT_DID_OPEN:
            document = message.params.text_document
            self.oversized.pop(unquote(document.uri), None)
            if len(document.text) > MAX_DOCUMENT_CHARS:
                self.mark_oversized(document.uri, len(document.text))
                # A didOpen of a document already open (with a smaller text) replaces it: the old
                # text stayed, pygls' copy and its tree, as context for the other documents.
                self.forget(document.uri)
                return True
            return False
        uri = document_uri(getattr(message, "params", None))
        if uri is not None:
            uri = unquote(uri)
        if uri is None or uri not in self.oversized:
            return False
        if method == types.TEXT_DOCUMENT_DID_CLOSE:
            self.oversized.pop(uri, None)
            return False
        if getattr(message, "id", None) is not None:
            self._send_response(message.id, error=JsonRpcException(
                f"{too_big(uri, self.oversized[uri])} ({LIMITS_DOC})", code=REQUEST_FAILED).to_response_error())
        return True   # its edits too: the document stays untracked until it is reopened

    def check_size(self, uri: str) -> None:
        document = self.workspace.text_documents.get(unquote(uri))
        if document is not None and len(document.source) > MAX_DOCUMENT_CHARS:
            self.mark_oversized(uri, len(document.source))
            self.forget(uri)

    def forget(self, uri: str) -> None:
        """Drop every copy of the document this connection keeps (pygls' text, the tree, the edit
        history) and stop its running requests."""
        self.workspace.remove_text_document(uri)
        self._server.forget_document(uri)

    def mark_oversized(self, uri: str, size: int) -> None:
        self.oversized[unquote(uri)] = size
        log.warning("%s (%s)", too_big(uri, size), LIMITS_DOC)
        self._server.window_show_message(types.ShowMessageParams(
            type=types.MessageType.Warning, message=f"dllm-lsp: {too_big(uri, size)}"))

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args):
        """pygls' shutdown, cancelling the pending requests over a copy of their table: cancelling
        one that pygls runs as a generator (workspace/executeCommand: dllm.fillHoles) answers it
        at once, which takes it out of the table pygls iterates. The shutdown then failed
        (-32603 "dictionary changed size during iteration") and the server never shut down."""
        if (user_handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield user_handler, args, None
        current_id = self.msg_id
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current_id and not future.done():
                future.cancel()
        self._shutdown = True

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None):
        """pygls keeps the future of a notification it runs as a generator or coroutine (its own
        didOpen / didChange / didClose) in the table of pending requests for good: ~1.8 KB a
        keystroke that never came back, and a disconnecting TCP client was said to leave
        thousands of requests pending. A notification's entry goes once it is done. So does that of
        a handler one of pygls' own handlers yields to, filed under a fresh id of pygls' (a
        `workspace/executeCommand` command: the task of every command run, its result included,
        stayed for the life of the connection); the request's own entry goes as it is answered."""
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        inner = getattr(callback, "func", None) == self._run_generator   # pygls 2.1: partial(_run_generator)
        if callback == self._check_handler_result or inner:
            future = self._request_futures.get(msg_id)
            if future is not None:
                future.add_done_callback(lambda done, key=msg_id: self._drop_entry(key, done))

    def _drop_entry(self, msg_id, future) -> None:
        if self._request_futures.get(msg_id) is future:
            del self._request_futures[msg_id]

    def _send_handler_result(self, future: Future, *, msg_id) -> None:
        if not future.cancelled():
            error = future.exception()
            if isinstance(error, JsonRpcException) and error.code in ORDINARY_ERRORS:
                self._request_futures.pop(msg_id, None)
                log.info("request %s answered %d: %s", msg_id, error.code, error.message)
                self._send_response(msg_id, error=error.to_response_error())
                return
        super()._send_handler_result(future, msg_id=msg_id)


def document_uri(params: Any) -> str | None:
    """The document a message is about: `textDocument.uri` of the standard params (lsprotocol's
    attrs), of our own methods' (pygls' `Object` namedtuples, or plain dicts), or the first
    argument of our commands (`dllm.fillHoles`, `dllm.applyCompanionEdit`: `[uri, ...]`)."""
    if isinstance(params, types.ExecuteCommandParams):
        if params.command.startswith("dllm.") and params.arguments and isinstance(params.arguments[0], str):
            return params.arguments[0]
        return None
    document = getattr(params, "text_document", None) or getattr(params, "textDocument", None)
    if document is None and isinstance(params, dict):
        document = params.get("textDocument")
    uri = document.get("uri") if isinstance(document, dict) else getattr(document, "uri", None)
    return uri if isinstance(uri, str) else None


LIMITS_DOC = "docs/protocol.md, Limits"


def too_big(uri: str, size: int) -> str:
    """One short line, the consequence first: editors show it in a one-line message area (a long
    one stopped Neovim at "Press ENTER", and read `4.0 Mi` for a file just over the limit)."""
    name = uri.rsplit("/", 1)[-1] or uri
    return f"no completions for {name}: {size:,} characters, over the {MAX_DOCUMENT_CHARS // (1024 * 1024)} Mi limit"

"""The language server: one thin handler per LSP method, registered in one place.

The logic lives in helpers: settings (options), documents (trees), completions (plan ->
infill -> finish), model_host (loading and running the model), streaming (progress).
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcRequestCancelled
from pygls.lsp.server import LanguageServer

from dllm_lsp import __version__
from dllm_lsp.loader import ModelLoadError
from dllm_lsp.multisite.companion import APPLY_COMMAND as APPLY_COMPANION

from .completions import Completion, CompletionService
from .documents import DocumentTrees
from .model_host import ModelHost, ModelUnavailable
from .positions import range_of
from .protocol import DllmProtocol
from .settings import ServerSettings, SettingsError
from .streaming import StreamReporter, params_from_object

log = logging.getLogger(__name__)

STREAM_METHOD = "dllm/inlineCompletion"
STATUS_METHOD = "dllm/status"
REQUEST_FAILED = -32803   # LSP 3.17 RequestFailed: the request was valid but could not be served


class RequestFailed(JsonRpcException):
    CODE = REQUEST_FAILED


class DllmLanguageServer(LanguageServer):
    def __init__(self, settings: ServerSettings | None = None, host: ModelHost | None = None,
                 protocol_cls: type = DllmProtocol) -> None:
        super().__init__("dllm-lsp", __version__, protocol_cls=protocol_cls)
        self.settings = settings or ServerSettings()
        self.owns_host = host is None   # a TCP connection borrows the process-wide model
        self.host = host or ModelHost()
        self.trees = DocumentTrees()
        self.completions = CompletionService(self.host, self.trees)
        self.load_task: asyncio.Task | None = None

    def start_io(self, stdin=None, stdout=None) -> None:
        from .transport import start_io  # noqa: PLC0415  (the robust frame reader, docs/protocol.md)

        start_io(self, stdin, stdout)

    def report_server_error(self, error: Exception, source: Any) -> None:
        # Cancellations and bad params are answered to the client; they are not server faults.
        if isinstance(error, (JsonRpcRequestCancelled, JsonRpcInvalidParams, RequestFailed)):
            return
        super().report_server_error(error, source)

    def show(self, kind: types.MessageType, message: str) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=f"dllm-lsp: {message}"))

    async def complete(self, uri: str, position: types.Position, on_step=None) -> Completion | None:
        try:
            return await self.completions.complete(uri, position, self.workspace, self.settings, on_step)
        except ModelUnavailable as exc:
            raise RequestFailed(str(exc)) from None
        except ValueError as exc:   # the planner or canvas refused the request
            raise JsonRpcInvalidParams(str(exc)) from None

    def inline_list(self, uri: str, completion: Completion | None) -> types.InlineCompletionList:
        if completion is None:
            return types.InlineCompletionList(items=[])
        document = self.workspace.get_text_document(uri)
        item = types.InlineCompletionItem(
            insert_text=completion.text, range=range_of(document, completion.start, completion.end)
        )
        if completion.companion is not None:   # multi-site: accepting the item adds the import
            item.command = types.Command(title=f"Add {completion.companion.statement}", command=APPLY_COMPANION,
                                         arguments=[uri, completion.companion.statement])
        return types.InlineCompletionList(items=[item])

    def take_options(self, options: Any, refusal: str) -> bool:
        """Merge client options into the settings; bad ones are shown and change nothing."""
        try:
            self.settings = self.settings.merged(options)
        except SettingsError as exc:
            self.show(types.MessageType.Error, f"{refusal}: {exc}")
            return False
        return True

    def ensure_model(self) -> None:
        """(Re)load the model when the settings name another model or device than the loaded one."""
        if self.host.needs_load(self.settings.model, self.settings.device):
            self.load_task = asyncio.ensure_future(load_with_progress(self))
        else:
            self.apply_options()

    def apply_options(self) -> None:
        self.host.apply_options(self.settings.context_tokens, self.settings.cache, self.settings.cache_refresh_every)


async def load_with_progress(ls: DllmLanguageServer) -> None:
    """Load the configured model, reported as work-done progress; a failure is shown, not fatal."""
    token: str | None = None
    caps = ls.client_capabilities.window
    if caps is not None and caps.work_done_progress:
        token = f"dllm-load-{uuid.uuid4()}"
        try:
            await asyncio.wait_for(ls.work_done_progress.create_async(token), timeout=5)
            ls.work_done_progress.begin(
                token, types.WorkDoneProgressBegin(title="dllm-lsp", message=f"loading model {ls.settings.model}")
            )
        except Exception:   # a client that refuses progress tokens still gets its model
            token = None
    message = "model failed to load"
    try:
        engine = await ls.host.load(ls.settings.model, ls.settings.device, ls.settings.context_tokens)
        ls.apply_options()
        info = engine.denoiser.describe()
        message = f"loaded {info['name']} ({info['family']}) on {info['device']}"
    except ModelLoadError as exc:
        message = f"model failed to load: {exc}"
        ls.show(types.MessageType.Error, message)
    finally:
        if token is not None:
            ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
    log.info(message)


def create_server(settings: ServerSettings | None = None, host: ModelHost | None = None,
                  protocol_cls: type = DllmProtocol) -> DllmLanguageServer:
    server = DllmLanguageServer(settings, host, protocol_cls)

    @server.feature(types.INITIALIZE)
    def initialize(ls: DllmLanguageServer, params: types.InitializeParams) -> None:
        ls.take_options(params.initialization_options, "bad initializationOptions, using defaults")

    @server.feature(types.INITIALIZED)
    def initialized(ls: DllmLanguageServer, params: types.InitializedParams) -> None:
        ls.ensure_model()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: DllmLanguageServer, params: types.DidChangeConfigurationParams) -> None:
        if ls.take_options(params.settings, "configuration ignored"):
            ls.ensure_model()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: DllmLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        ls.trees.open(doc.uri, doc.language_id, doc.text)
        ls.multisite.history.record(doc.uri, doc.text)   # dllm/nextEdits compares versions

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: DllmLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        document = ls.workspace.get_text_document(uri)
        ls.trees.change(uri, params.content_changes, document)
        ls.multisite.history.record(uri, document.source)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: DllmLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.trees.close(params.text_document.uri)
        ls.multisite.history.forget(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: DllmLanguageServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList:
        uri = params.text_document.uri
        return ls.inline_list(uri, await ls.complete(uri, params.position))

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(resolve_provider=False))
    async def completion(ls: DllmLanguageServer, params: types.CompletionParams) -> types.CompletionList:
        uri = params.text_document.uri
        found = await ls.complete(uri, params.position)
        if found is None:
            return types.CompletionList(is_incomplete=True, items=[])
        document = ls.workspace.get_text_document(uri)
        edit = types.TextEdit(range=range_of(document, found.start, found.end), new_text=found.text)
        first_line = found.text.splitlines()[0] if found.text else ""
        item = types.CompletionItem(
            label=first_line.strip() or found.text.strip(),
            kind=types.CompletionItemKind.Snippet if "\n" in found.text else types.CompletionItemKind.Text,
            detail=f"dllm · {found.result.steps} steps · {found.result.latency_ms:.0f} ms",
            text_edit=edit,
            filter_text=found.plan.typed_prefix or None,
            sort_text="0",
            insert_text_format=types.InsertTextFormat.PlainText,
        )
        if found.companion is not None:   # multi-site: the import the completion needs
            at = range_of(document, found.companion.offset, found.companion.offset)
            item.additional_text_edits = [types.TextEdit(range=at, new_text=found.companion.text)]
        # Incomplete: the next keystroke asks again, since the completion depends on every character.
        return types.CompletionList(is_incomplete=True, items=[item])

    @server.feature(STREAM_METHOD)
    async def streamed_inline_completion(ls: DllmLanguageServer, raw: Any) -> types.InlineCompletionList:
        params, token = params_from_object(raw)
        uri = params.text_document.uri
        reporter = StreamReporter(ls, uri, token, ls.settings.stream_interval_ms)
        found = await ls.complete(uri, params.position, reporter.on_step if token is not None else None)
        result = ls.inline_list(uri, found)
        if token is not None:
            reporter.final(result)
        return result

    @server.feature(STATUS_METHOD)
    def status(ls: DllmLanguageServer, params: Any) -> dict:
        return ls.host.status()

    from .multisite_handlers import register as register_multisite  # noqa: PLC0415

    register_multisite(server)

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: DllmLanguageServer, params: Any) -> None:
        if ls.owns_host:
            ls.host.shutdown()

    return server

"""The language server: its declared state, one thin handler per LSP method, and the one table
(FEATURES) that registers them.

The logic lives below the server: dllm_lsp.pipeline plans and finishes a completion, the engine
runs the model (through model_host, off the event loop), items.py turns a Completion into LSP
items, multisite_handlers.py serves the multi-site features. Calls go one way: this module
imports those, none of them imports this one (docs/architecture.md).
"""
from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import attrs
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams, JsonRpcRequestCancelled
from pygls.lsp.server import LanguageServer

from dllm_lsp import __version__
from dllm_lsp.model_folder import ModelLoadError
from dllm_lsp.multisite.companion import APPLY_COMMAND
from dllm_lsp.multisite.service import MultisiteService
from dllm_lsp.options import EDITOR_SETTINGS, OPTIONS, Options, SettingsError

from . import multisite_handlers as multisite
from .completions import CompletionService
from .documents import DocumentTrees
from .errors import RequestFailed, answered
from .items import completion_list, inline_list
from .model_host import HostView, ModelChoices, ModelHost, ModelUnavailable
from .params import StreamParams, decode, strict_converter
from .protocol import DllmProtocol
from .streaming import StreamReporter
from .transport import start_io

log = logging.getLogger(__name__)

STREAM_METHOD = "dllm/inlineCompletion"
STATUS_METHOD = "dllm/status"

# The section asked for with workspace/configuration (LSP 3.17's pull model), without a scopeUri:
# the options are one set per connection, not per document.
SECTION = "dllm"
# How long the model's load waits after `initialized` for the client's answer: clients answer in
# milliseconds, a client that never does delays the first completion by at most this, and its
# answer still applies when it comes (the model reloads if it names another).
CONFIGURATION_WAIT_S = 2.0
# A pull unanswered after this is given up, with a warning, and leaves pygls' table of pending
# requests (client_requests.py: pygls kept it there until the client disconnected).
CONFIGURATION_GIVE_UP_S = 30.0
OPTION_KEYS = frozenset(name for option in OPTIONS for name in (option.wire, option.field))


class DllmLanguageServer(LanguageServer):
    """A pygls server plus everything one connection keeps, declared here (and only here)."""

    def __init__(self, options: Options | None = None, host: ModelHost | None = None,
                 protocol_cls: type = DllmProtocol) -> None:
        super().__init__("dllm-lsp", __version__, protocol_cls=protocol_cls, converter_factory=strict_converter)
        self.options: Options = options or Options()
        self.owns_host = host is None   # a TCP connection borrows the process-wide model
        # This connection's view of the (possibly shared) models: its options choose its model.
        self.host: HostView = (host or ModelHost()).view()
        self.trees = DocumentTrees()
        self.completions = CompletionService(self.host, self.trees)
        self.multisite = MultisiteService(self.host)   # its edit history feeds dllm/nextEdits
        self.load_task: asyncio.Task | None = None   # held so the running load is not garbage-collected
        self.refusals = 0   # documents refused by the caps on this connection (told once)
        # The models and devices this client may ask for: None (stdio) is any folder and device of
        # the user's own machine; a TCP connection gets the operator's (serve --allow-model-dir).
        self.model_choices: ModelChoices | None = None
        # Settings pulled (workspace/configuration) or pushed (didChangeConfiguration), counted: a
        # pull's answer applies only if no newer pull or push came since it was asked for.
        self.settings_turn = 0
        self.settling: asyncio.Task | None = None   # the first pull, which the load waits for (bounded)
        self.pulls: set[asyncio.Task] = set()      # held so a pull in flight is not garbage-collected

    def start_io(self, stdin=None, stdout=None) -> int:
        return start_io(self, stdin, stdout)   # the robust frame reader (docs/protocol.md)

    def report_server_error(self, error: Exception, source: Any) -> None:
        # Cancellations and refusals are answered to the client; they are not server faults.
        if isinstance(error, (JsonRpcRequestCancelled, JsonRpcInvalidParams, RequestFailed)):
            return
        super().report_server_error(error, source)

    def show(self, kind: types.MessageType, message: str) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=f"dllm-lsp: {message}"))

    def take_options(self, options: Any, where: str) -> bool:
        """Apply a client's options, each on its own: a bad one is shown and keeps its value, the
        others apply (one bad setting must not cost the user the model it chose); unknown keys
        are logged (a misspelt option). False when `options` is not an object at all."""
        try:
            applied, refusals, unknown = self.options.applied(options)
        except SettingsError as exc:
            self.show(types.MessageType.Error, f"{where} ignored: {exc}")
            return False
        self.options = self.allowed(applied, refusals)
        if refusals:
            self.show(types.MessageType.Error, f"{where}: {'; '.join(refusals)} (the other options apply)")
        if unknown:
            self.window_log_message(types.LogMessageParams(
                type=types.MessageType.Warning, message=f"dllm-lsp: {where}: unknown options ignored: {', '.join(unknown)}"))
        return True

    def allowed(self, options: Options, refusals: list[str]) -> Options:
        """`options` with a `model` or `device` this client may not choose (model_choices) put back
        to the value it had, each refusal added to `refusals`. Checked before anything looks at
        the model's path, so a refused path is never touched on the server's disk."""
        if self.model_choices is None:
            return options
        kept = self.options.model
        model, device = options.model.model, options.model.device
        # `default` and `auto` are "let the server choose" (VS Code sends them whatever the user
        # left unset): over TCP the server's choice is its operator's model and device, not the
        # shipped default and whatever `auto` would pick on this machine.
        if model == "default":
            model = self.model_choices.model
        if device == "auto":
            device = self.model_choices.device
        refused_model = self.model_choices.model_refusal(model) if model != kept.model else None
        refused_device = self.model_choices.device_refusal(device) if device != kept.device else None
        for refusal in (refused_model, refused_device):
            if refusal is not None:
                refusals.append(refusal)
        if (refused_model, refused_device, model, device) == (None, None, options.model.model, options.model.device):
            return options
        return attrs.evolve(options, model=attrs.evolve(
            options.model, model=kept.model if refused_model else model, device=kept.device if refused_device else device))

    @property
    def pulls_settings(self) -> bool:
        """The client answers workspace/configuration (a capability left out means it does not)."""
        workspace = self.client_capabilities.workspace if self.client_capabilities is not None else None
        return workspace is not None and bool(workspace.configuration)

    @property
    def first_settings_pending(self) -> bool:
        """The first pull's bounded wait is on: the model loads at its end, not before."""
        return self.settling is not None and not self.settling.done()

    def pull_settings(self) -> asyncio.Task:
        """Ask the client for the `dllm` section; the task says whether the options changed. A
        pull still waiting is given up on: its answer would be dropped as superseded, and a client
        that answered none kept one request waiting per didChangeConfiguration (20,000 of them,
        and as many warnings 30 s later). Its answer, if it comes, is dropped quietly."""
        for older in self.pulls:
            older.cancel()
        self.settings_turn += 1
        task = asyncio.ensure_future(self.take_pulled(self.settings_turn))
        self.pulls.add(task)
        task.add_done_callback(self.pulls.discard)
        return task

    async def take_pulled(self, turn: int) -> bool:
        """Apply the client's answer for the `dllm` section as options (take_options: one schema,
        its refusals shown). An error, no answer, or an answer that is not one settings object
        (or null: nothing set) is a warning in the log, and the options stay."""
        where = "workspace/configuration"
        ask = types.ConfigurationParams(items=[types.ConfigurationItem(section=SECTION)])
        try:
            answer = await asyncio.wait_for(self.workspace_configuration_async(ask), CONFIGURATION_GIVE_UP_S)
        except asyncio.TimeoutError as exc:   # ours, or the request's own life (client_requests.RequestGivenUp)
            return self.warn(f"{where}: {str(exc) or f'no answer in {CONFIGURATION_GIVE_UP_S:.0f} s'}; the options stay")
        except Exception as exc:   # the client answered an error, or an answer that could not be read
            return self.warn(f"{where} failed: {getattr(exc, 'message', None) or exc}; the options stay")
        if turn != self.settings_turn:
            log.info("%s: an answer superseded by newer settings: dropped", where)
            return False
        if len(answer) != 1:
            return self.warn(f"{where}: {len(answer)} values for the one section asked for; the options stay")
        section = answer[0]
        if section is None:   # LSP: what a client answers for a section it has no settings for
            log.info("%s: the client has no %s settings", where, SECTION)
            return False
        if not isinstance(section, dict):
            return self.warn(f"{where}: the {SECTION} section is {json.dumps(section)[:60]}, not an object; "
                             "the options stay")
        # The keys only (a section may hold an editor's token): what a client sends is in the log.
        log.info("%s: the client's %s section holds %s", where, SECTION, ", ".join(sorted(section)) or "nothing")
        before = self.options
        self.take_options({k: v for k, v in section.items() if k not in EDITOR_SETTINGS}, where)
        changed = self.options != before
        if changed and not self.first_settings_pending:
            self.reconfigured()
        return changed

    def warn(self, message: str) -> bool:
        log.warning("%s", message)
        self.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=f"dllm-lsp: {message}"))
        return False

    def reconfigured(self) -> None:
        """The options changed: nothing computed under the old ones is shown again, and the model
        (re)loads if they name another one, except during the first pull's wait (it loads then)."""
        self.completions.options_changed()
        if not self.first_settings_pending:
            self.ensure_model()

    def forget_document(self, uri: str) -> None:
        """Drop all this connection keeps of a document: at didClose, and when an edit takes it past
        the size limit (no completions for it then; it had stayed here, stale, as context for the
        other documents and in the edit history)."""
        self.trees.close(uri)
        self.completions.forget(uri)
        self.multisite.history.forget(uri)

    def refuse_document(self, uri: str, reason: str) -> None:
        """A document past this connection's caps (documents.py: MAX_OPEN_DOCUMENTS,
        MAX_OPEN_CHARS): nothing of it is kept, pygls' copy of its text included; its requests
        answer RequestFailed with `reason` (DocumentTrees.get), its edits are dropped until it is
        reopened. The client is told once per connection, not at every refused document."""
        if unquote(uri) in self.workspace.text_documents:
            self.workspace.remove_text_document(unquote(uri))
        self.completions.forget(uri)
        self.multisite.history.forget(uri)
        self.refusals += 1
        if self.refusals == 1:
            log.warning("%s", reason)
            self.show(types.MessageType.Warning, f"{reason} (told once per connection)")
        else:
            log.debug("%s", reason)

    def forget_all_documents(self) -> None:
        """Drop every document of this connection now, texts and trees (the connection has gone):
        a gone connection's server is freed only by the cycle collector, seconds or minutes later,
        and its documents with it."""
        for uri in self.trees.uris:
            self.completions.forget(uri)
            self.multisite.history.forget(uri)
        self.trees.forget_all()
        workspace = self.protocol._workspace
        if workspace is not None:
            for uri in list(workspace.text_documents):
                workspace.remove_text_document(uri)

    def ensure_model(self) -> None:
        """(Re)load the model when the options name another model or device than the loaded one.
        Every other option is read per request: nothing of the loaded model is reconfigured."""
        model = self.options.model
        if self.host.needs_load(model.model, model.device) or self.host.loading:
            # The load starts now (or is already under way for another connection); progress is
            # reported around it once this client accepts a token. A request arriving meanwhile
            # (an editor opening a file at start-up) waits for it.
            try:
                loading = self.host.start_load(model.model, model.device)
            except ModelUnavailable as exc:   # more models than the server holds
                self.show(types.MessageType.Error, str(exc))
                return
            self.load_task = asyncio.ensure_future(load_with_progress(self, loading))


# How long a client has to accept the load's progress token; the model loads either way.
PROGRESS_CREATE_S = 5.0


async def load_with_progress(ls: DllmLanguageServer, loading: asyncio.Future) -> None:
    """Report the load in progress as work-done progress; a failure is shown, not fatal."""
    token: str | None = None
    model = ls.options.model
    caps = ls.client_capabilities.window
    if caps is not None and caps.work_done_progress:
        token = f"dllm-load-{uuid.uuid4()}"
        try:
            await asyncio.wait_for(ls.work_done_progress.create_async(token), timeout=PROGRESS_CREATE_S)
            ls.work_done_progress.begin(
                token, types.WorkDoneProgressBegin(title="dllm-lsp", message=f"loading model {model.model}")
            )
        except Exception:   # a client that refuses progress tokens still gets its model
            token = None
    message = "model failed to load"
    try:
        engine = await asyncio.shield(loading)
        info = engine.denoiser.describe()
        message = f"loaded {info['name']} ({info['family']}) on {info['device']}"
    except ModelLoadError as exc:
        message = f"model failed to load: {exc}"
        ls.show(types.MessageType.Error, message)
    finally:
        if token is not None:
            ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
            # pygls keeps a Future for every token it began (for the client's cancel) and never
            # lets go of it: one per load, for as long as the connection lasts
            ls.work_done_progress.tokens.pop(token, None)
    log.info(message)


# --- handlers ---------------------------------------------------------------------------------

def initialize(ls: DllmLanguageServer, params: types.InitializeParams) -> None:
    ls.take_options(params.initialization_options, "initializationOptions")


def initialized(ls: DllmLanguageServer, params: types.InitializedParams) -> None:
    if ls.pulls_settings:
        ls.settling = asyncio.ensure_future(settle(ls))
    else:
        ls.ensure_model()


async def settle(ls: DllmLanguageServer) -> None:
    """The first pull, then the load: the model the client's settings name loads first, not the
    default before it. The wait is bounded (CONFIGURATION_WAIT_S); a later answer still applies."""
    ls.pull_settings()
    # the latest pull: a didChangeConfiguration meanwhile asks again, and the first answer is dropped
    deadline = asyncio.get_running_loop().time() + CONFIGURATION_WAIT_S
    while (pending := {pull for pull in ls.pulls if not pull.done()}) and \
            (left := deadline - asyncio.get_running_loop().time()) > 0:
        await asyncio.wait(pending, timeout=left)
    if pending:
        log.warning("workspace/configuration: no answer in %.0f s; the model loads with the options it has, "
                    "and the answer applies when it comes", CONFIGURATION_WAIT_S)
    ls.ensure_model()


async def settled(ls: DllmLanguageServer) -> None:
    """A request that reads the options or needs the model waits out the first pull's (bounded)
    wait: the load starts at its end, and a request arriving before found no model and no load."""
    if ls.first_settings_pending:
        await asyncio.shield(ls.settling)


def after_settings(handler: Handler) -> Handler:
    """`handler` (a request that reads the options or needs the model), run once the first
    pull's wait is over."""
    @functools.wraps(handler)
    async def run(ls: DllmLanguageServer, *args: Any) -> Any:
        await settled(ls)
        return await handler(ls, *args)
    return run


def carries_options(settings: Any) -> bool:
    """A didChangeConfiguration that pushes the options: a `dllm` section, or option keys at the
    top level. Not `null` nor an object of other sections (VS Code's client, Neovim's, Helix' and
    eglot's pull model): from a client that answers workspace/configuration, the section is pulled."""
    return isinstance(settings, dict) and ("dllm" in settings or not OPTION_KEYS.isdisjoint(settings))


def did_change_configuration(ls: DllmLanguageServer, params: types.DidChangeConfigurationParams) -> None:
    if ls.pulls_settings and not carries_options(params.settings):
        ls.pull_settings()
        return
    ls.settings_turn += 1   # a pull asked before this push answers older settings than these
    if ls.take_options(params.settings, "configuration"):
        ls.reconfigured()


def did_open(ls: DllmLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
    doc = params.text_document
    # A large document's tree is parsed in a worker thread from here on (documents.py)
    refused = ls.trees.open(doc.uri, doc.language_id, doc.text)
    if refused is not None:
        ls.refuse_document(doc.uri, refused)
        return
    # dllm/nextEdits compares versions: the plain text (lone surrogates as U+FFFD), as didChange records
    ls.multisite.history.record(doc.uri, ls.trees.text_of(doc.uri))


def did_change(ls: DllmLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    if unquote(uri) not in ls.workspace.text_documents:
        if ls.trees.refused(uri) is None:   # a refused document's edits are expected: dropped quietly
            log.warning("didChange for %s, which is not open: ignored", uri)
        return
    document = ls.workspace.get_text_document(uri)
    before = ls.trees.text_of(uri)
    refused = ls.trees.change(uri, params.content_changes, document)
    if refused is not None:   # grown past the connection's caps
        ls.refuse_document(uri, refused)
        return
    ls.multisite.history.record(uri, document.source)
    if before is not None:   # an accepted suggestion starts the next completion now (prefetch)
        ls.completions.document_changed(uri, before, ls.trees.get(uri, ls.workspace)[0], ls.options)


def did_close(ls: DllmLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.forget_document(params.text_document.uri)


async def inline_completion(ls: DllmLanguageServer, params: types.InlineCompletionParams) -> types.InlineCompletionList:
    await settled(ls)
    uri = params.text_document.uri
    found = await answered(ls.completions.complete(uri, params.position, ls.workspace, ls.options))
    return inline_list(uri, found, ls.workspace.position_codec)


async def completion(ls: DllmLanguageServer, params: types.CompletionParams) -> types.CompletionList:
    await settled(ls)
    found = await answered(ls.completions.complete(params.text_document.uri, params.position, ls.workspace,
                                                   ls.options))
    return completion_list(found, ls.workspace.position_codec)


async def streamed_inline_completion(ls: DllmLanguageServer, raw: Any) -> types.InlineCompletionList:
    params = decode(raw, StreamParams, f"{STREAM_METHOD} params")
    await settled(ls)
    uri, token = params.text_document.uri, params.partial_result_token
    reporter = None
    if token is not None:
        reporter = StreamReporter(ls.progress, ls.workspace.position_codec, token,
                                  ls.options.server.stream_interval_ms)
    try:
        found = await answered(ls.completions.complete(uri, params.position, ls.workspace, ls.options,
                                                       reporter.on_step if reporter is not None else None))
    except BaseException:
        if reporter is not None:
            reporter.close()       # answered with an error (a cancel, say): no report after it
        raise
    result = inline_list(uri, found, ls.workspace.position_codec)
    if reporter is not None:
        reporter.final(result)
    return result


def status(ls: DllmLanguageServer, params: Any) -> dict:
    # the typing counters (typedThrough*, prefetch*, rebased, dropped, heldBack): this connection's (docs/protocol.md)
    return {**ls.host.status(), "contextTokens": ls.options.planner.context_tokens, **ls.completions.counters}


def shutdown(ls: DllmLanguageServer, params: Any) -> None:
    if ls.owns_host:
        ls.host.shutdown()


# --- the table --------------------------------------------------------------------------------

Handler = Callable[..., Any]

# (method, registration options, handler); commands go through workspace/executeCommand.
FEATURES: list[tuple[str, Any, Handler]] = [
    (types.INITIALIZE, None, initialize),
    (types.INITIALIZED, None, initialized),
    (types.WORKSPACE_DID_CHANGE_CONFIGURATION, None, did_change_configuration),
    (types.TEXT_DOCUMENT_DID_OPEN, None, did_open),
    (types.TEXT_DOCUMENT_DID_CHANGE, None, did_change),
    (types.TEXT_DOCUMENT_DID_CLOSE, None, did_close),
    # register with InlineCompletionOptions, or pygls advertises nothing
    (types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions(), inline_completion),
    (types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(resolve_provider=False), completion),
    (STREAM_METHOD, None, streamed_inline_completion),
    (STATUS_METHOD, None, status),
    (types.TEXT_DOCUMENT_CODE_ACTION,
     types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.RefactorRewrite]),
     after_settings(multisite.code_action)),
    (multisite.NEXT_EDITS_METHOD, None, after_settings(multisite.next_edits)),
    (types.SHUTDOWN, None, shutdown),
]
COMMANDS: list[tuple[str, Handler]] = [
    (multisite.FILL_COMMAND, after_settings(multisite.fill_holes)),
    (APPLY_COMMAND, multisite.apply_companion_edit),
]


def create_server(options: Options | None = None, host: ModelHost | None = None,
                  protocol_cls: type = DllmProtocol) -> DllmLanguageServer:
    server = DllmLanguageServer(options, host, protocol_cls)
    for method, registration, handler in FEATURES:
        server.feature(method, registration)(handler) if registration is not None else server.feature(method)(handler)
    for name, handler in COMMANDS:
        server.command(name)(handler)
    return server

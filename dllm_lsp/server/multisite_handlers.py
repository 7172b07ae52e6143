"""Handlers for the multi-site features (fill holes, next edits, companion edits).

Registered by app.create_server through `register`; the logic lives in dllm_lsp.multisite,
these functions only translate between LSP shapes and document offsets.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.workspace.text_document import TextDocument

from dllm_lsp.multisite.companion import APPLY_COMMAND, companion_edit
from dllm_lsp.multisite.holes import DEFAULT_MARKER, find_holes
from dllm_lsp.multisite.service import MultisiteService
from dllm_lsp.multisite.sites import Outcome
from dllm_lsp.syntax.snapshot import Snapshot

from .model_host import ModelUnavailable
from .positions import offset_of, range_of

FILL_COMMAND = "dllm.fillHoles"
NEXT_EDITS_METHOD = "dllm/nextEdits"

_converter = get_converter()


def register(server) -> None:
    """Add the multi-site handlers to `server` and give it a MultisiteService (`server.multisite`)."""
    server.multisite = MultisiteService(server.host)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.RefactorRewrite]),
    )
    def code_action(ls: LanguageServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        only = params.context.only if params.context is not None else None
        if only and not any(types.CodeActionKind.RefactorRewrite.value.startswith(k) for k in only):
            return []
        uri = params.text_document.uri
        parsed, document, language_id = ls.trees.get(uri, ls.workspace)
        start, end = offset_of(document, params.range.start), offset_of(document, params.range.end)
        if end < start:
            raise JsonRpcInvalidParams("the range ends before it starts")
        if not ls.settings.language_enabled(language_id):
            return []
        marker = hole_marker(ls)
        holes = find_holes(parsed.snapshot, start, end, marker).holes
        if not holes:
            return []
        title = f"Fill {len(holes)} hole{'s' if len(holes) != 1 else ''} with dllm"
        arguments = [uri, _converter.unstructure(params.range)]
        return [types.CodeAction(
            title=title,
            kind=types.CodeActionKind.RefactorRewrite,
            command=types.Command(title=title, command=FILL_COMMAND, arguments=arguments),
        )]

    @server.command(FILL_COMMAND)
    async def fill_holes(ls: LanguageServer, *args: Any) -> dict:
        follow_outer_cancellation(ls)
        uri, lsp_range, options = fill_arguments(args)
        parsed, document, language_id = ls.trees.get(uri, ls.workspace)
        version, text = document.version, parsed.text
        start, end = offset_of(document, lsp_range.start), offset_of(document, lsp_range.end)
        if end < start:
            raise JsonRpcInvalidParams("the range ends before it starts")
        settings = ls.settings
        try:
            report = await ls.multisite.fill_holes(
                text, language_id, start, end, decode_settings(settings),
                marker=options.get("marker") or hole_marker(ls),
                span_tokens=settings.max_span_tokens, line_tokens=settings.max_line_tokens, tree=parsed.tree,
            )
        except ModelUnavailable as exc:
            raise request_failed(str(exc)) from None
        except ValueError as exc:
            raise JsonRpcInvalidParams(str(exc)) from None
        document = ls.workspace.get_text_document(uri)
        if document.version != version or document.source != text:
            return {"applied": False, "reason": "the document changed while the holes were being filled",
                    "edit": None, "sites": []}
        edit = workspace_edit(ls, uri, version, [o for o in report.outcomes if o.changes_text], document)
        applied = False
        if edit is not None and options.get("apply", True):
            answer = await ls.workspace_apply_edit_async(
                types.ApplyWorkspaceEditParams(edit=edit, label="Fill holes")
            )
            applied = bool(answer.applied)
        return {
            "applied": applied,
            "edit": _converter.unstructure(edit) if edit is not None else None,
            "scope": _converter.unstructure(range_of(document, report.start, report.end)),
            "sites": [site_json(document, o) for o in report.outcomes],
        }

    @server.command(APPLY_COMMAND)
    async def apply_companion_edit(ls: LanguageServer, *args: Any) -> dict:
        if len(args) != 2 or not isinstance(args[0], str) or not isinstance(args[1], str):
            raise JsonRpcInvalidParams(f"{APPLY_COMMAND} takes [uri, import statement]")
        uri, statement = args
        parsed, document, language_id = ls.trees.get(uri, ls.workspace)
        found = companion_edit(statement, parsed.text, language_id, parsed.tree)
        if found is None:
            return {"applied": False, "reason": "not a valid import, or the file already has it"}
        position = range_of(document, found.offset, found.offset)
        edit = workspace_edit_from(ls, uri, document.version, [types.TextEdit(range=position, new_text=found.text)])
        answer = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label="Add import"))
        return {"applied": bool(answer.applied), "edit": _converter.unstructure(edit)}

    @server.feature(NEXT_EDITS_METHOD)
    async def next_edits(ls: LanguageServer, raw: Any) -> dict:
        uri, position = next_edits_params(raw)
        parsed, live, language_id = ls.trees.get(uri, ls.workspace)
        version, text = live.version, parsed.text
        # ranges refer to this version even if the user types on while the model fills
        document = TextDocument(uri, source=text, version=version, position_codec=live.position_codec)
        near_line = None
        if position is not None:
            offset_of(document, position)   # InvalidParams when outside the document
            near_line = position.line
        ls.multisite.history.record(uri, text)
        try:
            report = await ls.multisite.next_edits(
                uri, text, language_id, decode_settings(ls.settings),
                line_tokens=ls.settings.max_line_tokens, near_line=near_line, tree=parsed.tree,
            )
        except ModelUnavailable as exc:
            raise request_failed(str(exc)) from None
        change = None
        if report.change is not None:
            c = report.change
            change = {"kind": c.kind, "range": _converter.unstructure(range_of(document, c.start, c.end))}
            if c.kind == "rename":
                change.update({"oldName": c.old_name, "newName": c.new_name})
            else:
                counted = "Parameters" if c.kind == "signature" else "Arguments"
                change.update({"function": c.new_name, f"old{counted}": c.old_count, f"new{counted}": c.new_count})
        edits = [site_json(document, o) | {"newText": o.new_text} for o in report.outcomes if o.changes_text]
        kept = [site_json(document, o) for o in report.outcomes if not o.changes_text]
        return {"version": version, "change": change, "edits": edits, "kept": kept}


def follow_outer_cancellation(ls) -> bool:
    """Let $/cancelRequest stop this command's denoising.

    pygls runs a command inside its own executeCommand handler, under a fresh internal id: a
    cancel cancels only the outer request future (the client gets RequestCancelled) while the
    command task, and the model with it, would run on. pygls files the outer future just
    before the command task, so the entry before ours is the request to follow. Returns False
    (no link, the command runs to its end) when pygls' bookkeeping looks different."""
    task = asyncio.current_task()
    pending = list(getattr(ls.protocol, "_request_futures", {}).values())
    index = next((i for i, f in enumerate(pending) if f is task), None)
    if task is None or not index:
        return False
    outer = pending[index - 1]
    if isinstance(outer, asyncio.Task) or not isinstance(outer, (asyncio.Future, concurrent.futures.Future)):
        return False
    loop = asyncio.get_running_loop()

    def cancel_command(future) -> None:
        if future.cancelled() and not task.done():
            loop.call_soon_threadsafe(task.cancel)

    outer.add_done_callback(cancel_command)
    return True


def hole_marker(ls) -> str:
    return getattr(ls.settings, "hole_marker", None) or DEFAULT_MARKER


def decode_settings(settings):
    from .completions import decode_settings as from_server_settings

    return from_server_settings(settings)


def request_failed(message: str):
    from .app import RequestFailed  # app imports this module

    return RequestFailed(message)


def fill_arguments(args: tuple) -> tuple[str, types.Range, dict]:
    """[uri, range, options?] with options {"marker": str, "apply": bool}."""
    if len(args) not in (2, 3) or not isinstance(args[0], str):
        raise JsonRpcInvalidParams(f"{FILL_COMMAND} takes [uri, range, options?]")
    lsp_range = range_from_json(args[1])
    if lsp_range is None:
        raise JsonRpcInvalidParams(f"{FILL_COMMAND}: the second argument must be an LSP Range")
    options = args[2] if len(args) == 3 else {}
    if not isinstance(options, dict):
        raise JsonRpcInvalidParams(f"{FILL_COMMAND}: options must be a JSON object")
    marker = options.get("marker")
    if marker is not None and (not isinstance(marker, str) or not marker.strip()):
        raise JsonRpcInvalidParams(f"{FILL_COMMAND}: marker must be a non-empty string")
    if not isinstance(options.get("apply", True), bool):
        raise JsonRpcInvalidParams(f"{FILL_COMMAND}: apply must be true or false")
    return args[0], lsp_range, options


def next_edits_params(raw: Any) -> tuple[str, types.Position | None]:
    params = raw._asdict() if hasattr(raw, "_asdict") else raw
    if not isinstance(params, dict):
        raise JsonRpcInvalidParams(f"{NEXT_EDITS_METHOD} params must be an object")
    document = params.get("textDocument")
    document = document._asdict() if hasattr(document, "_asdict") else document
    if not isinstance(document, dict) or not isinstance(document.get("uri"), str):
        raise JsonRpcInvalidParams(f"{NEXT_EDITS_METHOD} needs textDocument.uri")
    position = params.get("position")
    if position is None:
        return document["uri"], None
    position = position_from_json(position)
    if position is None:
        raise JsonRpcInvalidParams(f"{NEXT_EDITS_METHOD}: position must be an LSP Position")
    return document["uri"], position


def position_from_json(value: Any) -> types.Position | None:
    """A Position from JSON (or pygls' named tuple), None when it is not one."""
    value = value._asdict() if hasattr(value, "_asdict") else value
    if not isinstance(value, dict):
        return None
    line, character = value.get("line"), value.get("character")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (line, character)):
        return None
    return types.Position(line=line, character=character)   # negative: offset_of refuses it


def range_from_json(value: Any) -> types.Range | None:
    value = value._asdict() if hasattr(value, "_asdict") else value
    if not isinstance(value, dict):
        return None
    start, end = position_from_json(value.get("start")), position_from_json(value.get("end"))
    return types.Range(start=start, end=end) if start is not None and end is not None else None


def site_json(document, outcome: Outcome) -> dict:
    entry = {
        "range": _converter.unstructure(range_of(document, outcome.start, outcome.end)),
        "label": outcome.label,
        "source": outcome.source,
    }
    if outcome.reason:
        entry["reason"] = outcome.reason
    return entry


def workspace_edit(ls, uri: str, version: int, outcomes: list[Outcome], document) -> types.WorkspaceEdit | None:
    if not outcomes:
        return None
    edits = [types.TextEdit(range=range_of(document, o.start, o.end), new_text=o.new_text) for o in outcomes]
    return workspace_edit_from(ls, uri, version, edits)


def workspace_edit_from(ls, uri: str, version: int | None, edits: list[types.TextEdit]) -> types.WorkspaceEdit:
    """One WorkspaceEdit: versioned documentChanges when the client supports them (a stale
    edit is then refused by the client), a plain `changes` map otherwise."""
    workspace = ls.client_capabilities.workspace if ls.client_capabilities else None
    edit_caps = workspace.workspace_edit if workspace is not None else None
    if edit_caps is not None and edit_caps.document_changes:
        identifier = types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(text_document=identifier, edits=edits)])
    return types.WorkspaceEdit(changes={uri: edits})

"""Handlers for the multi-site features (fill holes, next edits, companion edits).

Listed in app.FEATURES / app.COMMANDS; the logic lives in dllm_lsp.multisite, these functions
only translate between LSP shapes and document offsets. `ls` is the DllmLanguageServer (its
trees, options and multisite service are declared there).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import weakref
from collections.abc import AsyncIterator
from typing import Any

from lsprotocol import types
from lsprotocol.converters import get_converter
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from dllm_lsp.multisite.companion import APPLY_COMMAND, import_edit
from dllm_lsp.multisite.holes import find_holes, is_stub_file
from dllm_lsp.multisite.sites import Outcome
from dllm_lsp.syntax.snapshot import Snapshot

from .documents import tree_ready, with_tree
from .errors import answered
from .params import NextEditsParams, companion_arguments, decode, fill_arguments
from .positions import LspTextDocument, line_end, line_starts, offset_of, range_in_text, range_of

FILL_COMMAND = "dllm.fillHoles"
NEXT_EDITS_METHOD = "dllm/nextEdits"
# How long a command waits for the client's answer to workspace/applyEdit. Editors apply a
# one-file edit at once; a client that never answers (one without the feature that ignores
# the request) left the command waiting for ever.
APPLY_EDIT_TIMEOUT_S = 10.0

_converter = get_converter()


async def code_action(ls, params: types.CodeActionParams) -> list[types.CodeAction]:
    only = params.context.only if params.context is not None else None
    if only and not any(is_kind_within(types.CodeActionKind.RefactorRewrite.value, k) for k in only):
        return []
    uri = params.text_document.uri
    snapshot, document, language_id = ls.trees.get(uri, ls.workspace)
    start, end = offset_of(document, params.range.start), offset_of(document, params.range.end)
    if end < start:
        raise JsonRpcInvalidParams("the range ends before it starts")
    if not ls.options.planner.language_enabled(language_id):
        return []
    # off the event loop for a big document: an editor asks for code actions at every cursor
    # move, and each waited on the loop for the document's parse
    planner = ls.options.planner
    scope = await with_tree(snapshot, find_holes, snapshot, start, end, planner.hole_marker,
                            planner.max_span_tokens, planner.max_line_tokens, is_stub_file(uri))
    holes = scope.holes
    if not holes:
        return []
    # A cursor outside every function and class is offered the file's holes: the title says so,
    # as the sites may be anywhere in it (a selection's holes are the ones it shows)
    where = " in this file" if end == start and (scope.start, scope.end) == (0, len(snapshot.text)) else ""
    title = f"Fill {len(holes)} hole{'s' if len(holes) != 1 else ''}{where} with dllm"
    # The version the range holds for: run after the document changed (code actions are
    # offered and picked apart), the range covered other text (a function pasted above made the
    # action offered for `f`'s TODO fill `g`'s `pass`).
    arguments = [uri, _converter.unstructure(params.range), {"version": document.version}]
    return [types.CodeAction(
        title=title,
        kind=types.CodeActionKind.RefactorRewrite,
        command=types.Command(title=title, command=FILL_COMMAND, arguments=arguments),
    )]


async def fill_holes(ls, *args: Any) -> dict:
    follow_outer_cancellation(ls)
    uri, lsp_range, fill = fill_arguments(args, FILL_COMMAND)
    snapshot, document, language_id = ls.trees.get(uri, ls.workspace)
    version = document.version
    if fill.version is not None and fill.version != version:
        return {"applied": False, "edit": None, "sites": [],
                "reason": f"the document changed since the range was given (version {fill.version}, now {version})"}
    start, end = offset_of(document, lsp_range.start), offset_of(document, lsp_range.end)
    if end < start:
        raise JsonRpcInvalidParams("the range ends before it starts")
    if not ls.options.planner.language_enabled(language_id):
        return {"applied": False, "reason": language_off(language_id), "edit": None, "sites": []}
    marker = fill.marker or ls.options.planner.hole_marker
    await tree_ready(snapshot)      # not in asyncio's default pool, where the search for holes runs
    report = await answered(ls.multisite.fill_holes(snapshot, start, end, ls.options, marker,
                                                    stub_file=is_stub_file(uri)))
    async with edit_turn(ls, uri):
        stale = why_stale(ls, uri, version, snapshot, "while the holes were being filled")
        if stale is not None:
            return {"applied": False, "reason": stale, "edit": None, "sites": []}
        document = ls.workspace.get_text_document(uri)
        edit = workspace_edit(ls, uri, version, [o for o in report.outcomes if o.changes_text], document)
        applied, reason = False, None
        if edit is None:
            reason = nothing_filled(report.outcomes)
        elif fill.apply:
            applied, reason = await ask_to_apply(ls, edit, "Fill holes", uri, snapshot)
    return {
        "applied": applied,
        **({"reason": reason} if reason else {}),
        "edit": _converter.unstructure(edit) if edit is not None else None,
        "scope": _converter.unstructure(range_of(document, report.start, report.end)),
        "sites": [site_json(document, o) for o in report.outcomes],
    }


async def apply_companion_edit(ls, *args: Any) -> dict:
    uri, statement = companion_arguments(args, APPLY_COMMAND)
    snapshot, document, _ = ls.trees.get(uri, ls.workspace)
    version, codec = document.version, document.position_codec
    # The import block is looked for in the tree: for a big document, off the loop (the edit the
    # user accepted just before left its tree to parse)
    found = await with_tree(snapshot, import_edit, statement, snapshot)
    if found is None:
        return {"applied": False, "reason": "not a valid import, or the file already has it"}
    # placed in the version it was found in: the user may have typed on meanwhile (a versioned
    # edit is then refused by the client)
    position = range_in_text(snapshot.text, found.offset, found.offset, codec)
    edit = workspace_edit_from(ls, uri, version, [types.TextEdit(range=position, new_text=found.text)])
    async with edit_turn(ls, uri):
        # Checked only where the server sends it: a client without workspace/applyEdit gets the
        # edit in the answer, versioned for the text it was found in, to apply or refuse itself.
        stale = why_stale(ls, uri, version, snapshot, "before the import was sent") \
            if why_edits_cannot_be_applied(ls) is None else None
        if stale is not None:
            return {"applied": False, "reason": stale}
        applied, reason = await ask_to_apply(ls, edit, "Add import", uri, snapshot)
    return {"applied": applied, **({"reason": reason} if reason else {}), "edit": _converter.unstructure(edit)}


class _EditTurns:
    """One connection's workspace/applyEdit requests, one document at a time.

    Two commands on one document (two fills, a fill and an import) were computed on the same
    version and sent one after the other while the client had answered neither: a client that
    takes a plain `changes` map (no versioned documentChanges to refuse a stale edit with)
    applied the second edit on the text the first had changed, at offsets that no longer held
    what it replaced (`return x + TODO` became `return x + x.dtype(1, 1,)ype(1, 1,)`). A command
    now waits for the document's previous edit to be answered, then sends its own only if it
    was computed on the document as it is now."""

    def __init__(self) -> None:
        # per document, its lock and how many commands hold it or wait for it (the lock is
        # dropped with the last of them, not kept for every URI ever used)
        self.locks: dict[str, tuple[asyncio.Lock, int]] = {}
        # per document, the snapshot the last applied (or unanswered) edit was computed on: an
        # edit computed on it too is stale even before the client's didChange arrives
        self.spent: dict[str, weakref.ref[Snapshot]] = {}

    def spend(self, uri: str, snapshot: Snapshot) -> None:
        def gone(ref: weakref.ref) -> None:   # the document changed on: nothing to remember
            if self.spent.get(uri) is ref:
                del self.spent[uri]
        self.spent[uri] = weakref.ref(snapshot, gone)


_turns: weakref.WeakKeyDictionary[Any, _EditTurns] = weakref.WeakKeyDictionary()


@contextlib.asynccontextmanager
async def edit_turn(ls, uri: str) -> AsyncIterator[None]:
    """Hold `uri`'s turn to send workspace/applyEdit on this connection (`ls`)."""
    turns = _turns.setdefault(ls, _EditTurns())
    lock, users = turns.locks.get(uri, (None, 0))
    lock = lock or asyncio.Lock()
    turns.locks[uri] = (lock, users + 1)
    try:
        async with lock:
            yield
    finally:
        lock, users = turns.locks[uri]
        if users == 1:
            del turns.locks[uri]
        else:
            turns.locks[uri] = (lock, users - 1)


def why_stale(ls, uri: str, version: int | None, snapshot: Snapshot, when: str) -> str | None:
    """Why an edit computed on `snapshot` (document version `version`) may no longer be sent:
    the document was closed, changed, or already took another edit computed on the same text.
    None when it is still the document the edit was computed for."""
    if ls.trees.text_of(uri) is None:     # closed, or no longer kept (grown past the caps)
        return f"the document was closed {when}"
    document = ls.workspace.get_text_document(uri)
    if document.version != version or document.source != snapshot.text:
        return f"the document changed {when}"
    turns = _turns.get(ls)
    spent = turns.spent.get(uri) if turns is not None else None
    if spent is not None and spent() is snapshot:
        return f"another edit was applied to this version of the document (or is still unanswered) {when}"
    return None


def is_kind_within(kind: str, asked: str) -> bool:
    """Whether the code action kind `kind` is `asked` or one of its sub-kinds (LSP's kinds are
    dot-separated hierarchies: `refactor` asks for `refactor.rewrite`; `ref` asks for nothing)."""
    return kind == asked or kind.startswith(asked + ".")


def nothing_filled(outcomes: list[Outcome]) -> str:
    """Why a fill changed nothing, for the client to show: every site kept its text (the sites
    say why, one by one), or the range held no hole. It answered `applied: false` without a
    reason, which a client could not tell from a fill it had asked not to apply."""
    if not outcomes:
        return "no hole could be filled: the range holds no hole"
    reasons = list(dict.fromkeys(o.reason for o in outcomes if o.reason))   # each once, in document order
    return "no hole could be filled: " + ("; ".join(reasons) if reasons else "every site kept its text")


def language_off(language_id: str) -> str:
    # Every feature honours the `languages` option: completions were off for the language while
    # hole fills and next edits still edited its files.
    return f"dllm is off for {language_id} (the `languages` option)"


async def ask_to_apply(ls, edit: types.WorkspaceEdit, label: str, uri: str | None = None,
                       snapshot: Snapshot | None = None) -> tuple[bool, str | None]:
    """workspace/applyEdit: (applied, why not). A client that refuses, answers with an error, or
    answers something that is no ApplyWorkspaceEditResult has not applied it (an error reply
    failed the command with InternalError; an unreadable one left it waiting for ever). A client
    that has not declared `workspace.applyEdit: true` is not asked: LSP reads a capability left
    out as unsupported, and such a client was sent the request anyway and the command waited
    APPLY_EDIT_TIMEOUT_S for an answer that a client without the feature never sends. The edit
    it gets in the answer is its to apply. An answer that does not come in
    APPLY_EDIT_TIMEOUT_S counts as not applied. `uri`, `snapshot`: the document the edit was
    computed on, marked spent when the client applied it (or may still: no answer), so that
    another edit computed on the same text is not sent after it (the caller holds edit_turn)."""
    refused = why_edits_cannot_be_applied(ls)
    if refused is not None:
        return False, refused
    if uri is not None and snapshot is not None:
        # marked before the answer: a late answer may still apply it
        _turns.setdefault(ls, _EditTurns()).spend(uri, snapshot)
    try:
        answer = await asyncio.wait_for(
            ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=edit, label=label)),
            APPLY_EDIT_TIMEOUT_S)
    except TimeoutError:
        return False, f"the client did not answer workspace/applyEdit in {APPLY_EDIT_TIMEOUT_S:g} s"
    except JsonRpcException as exc:
        unspend(ls, uri, snapshot)
        return False, f"the client did not apply the edit: {exc.message}"
    if answer is None or answer.applied is not True:
        unspend(ls, uri, snapshot)
        why = getattr(answer, "failure_reason", None)
        return False, f"the client did not apply the edit{': ' + why if why else ''}"
    return True, None


def unspend(ls, uri: str | None, snapshot: Snapshot | None) -> None:
    """The client refused the edit computed on `snapshot`: the text is still free for another."""
    turns = _turns.get(ls)
    spent = turns.spent.get(uri) if turns is not None and uri is not None else None
    if spent is not None and spent() is snapshot:
        del turns.spent[uri]


def why_edits_cannot_be_applied(ls) -> str | None:
    """Why the client may not be sent workspace/applyEdit, or None when it declared
    `workspace.applyEdit: true` (the only way LSP lets a client say it applies edits)."""
    workspace = ls.client_capabilities.workspace if ls.client_capabilities else None
    declared = workspace.apply_edit if workspace is not None else None
    if declared is True:
        return None
    said = "is false" if declared is False else "was not declared"
    return f"the client cannot apply edits (workspace.applyEdit {said}): the edit is in this answer"


async def next_edits(ls, raw: Any) -> dict:
    params = decode(raw, NextEditsParams, f"{NEXT_EDITS_METHOD} params")
    uri = params.text_document.uri
    snapshot, live, language_id = ls.trees.get(uri, ls.workspace)
    version = live.version
    # ranges refer to this version even if the user types on while the model fills
    document = LspTextDocument(uri, source=snapshot.text, version=version, position_codec=live.position_codec)
    near = None
    if params.position is not None:
        at = offset_of(document, params.position)   # InvalidParams when outside the document
        near = (line_starts(snapshot.text)[params.position.line], line_end(snapshot.text, at))   # its line, as LSP counts
    if not ls.options.planner.language_enabled(language_id):   # no edits, and none remembered
        return {"version": version, "change": None, "edits": [], "kept": [], "reason": language_off(language_id)}
    ls.multisite.history.record(uri, snapshot.text)
    await tree_ready(snapshot)      # not in asyncio's default pool, where the edits are planned
    report = await answered(ls.multisite.next_edits(uri, snapshot, ls.options, near))
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

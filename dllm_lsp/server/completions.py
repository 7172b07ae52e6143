"""Cursor completions for the server: document snapshot -> pipeline plan -> model -> Completion.

Shared by inline completion, classic completion and the streamed request; a newer request for
the same document cancels an older one still denoising.

Typing is the workload, so three things keep the model out of the way:
- **one version per request**: a completion is planned and finished on the snapshot it was
  asked for; if the document changed while the model denoised, it is moved onto the current
  version when that is exact (rebase.py) and post-processing there lets it through unchanged,
  and dropped otherwise, never shown misplaced;
- **typed-through reuse**: while the user types the characters the last suggestion goes on
  with, the next request is answered from it, without a model call, when post-processing on
  the current version lets it through as it would a fresh completion there;
- **prefetch after accept**: an edit that inserts the last suggestion (the editor accepted it)
  starts the next completion at the new cursor at once, and the request that follows waits
  for that run instead of starting another.
"""
from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
from collections.abc import Callable
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import JsonRpcRequestCancelled
from pygls.workspace import Workspace

from dllm_lsp.engine.denoise import Cancelled
from dllm_lsp.engine.engine import CancelToken
from dllm_lsp.engine.types import StepState
from dllm_lsp.options import Options
from dllm_lsp.pipeline import Completion, CompletionPlan, plan
from dllm_lsp.rebase import rebase
from dllm_lsp.syntax.snapshot import Snapshot

from .documents import DocumentTrees, tree_ready, with_tree
from .model_host import ModelHost
from .positions import offset_in_text

# Where a streamed step's text, over [start, end) of the version its request was made on, goes on
# the document as it is now: (that text, start, end), or None when it no longer fits. Called on
# the event loop, where edits are applied, so a report it places matches the version it is sent
# after.
Placer = Callable[[str, int, int], tuple[str, int, int] | None]
StepCallback = Callable[[CompletionPlan, StepState, Placer], None]


class Superseded(JsonRpcRequestCancelled):
    """A newer request for the same document took this one's place."""


@dataclasses.dataclass
class Prefetch:
    text: str                 # the document version it was started on
    offset: int               # its cursor
    task: asyncio.Task
    taken: bool = False       # a request took it (a hit counts once: the keystroke's plain and streamed take one run)


@dataclasses.dataclass
class SharedRun:
    """The plain run of one keystroke (a document version and a cursor), which every plain request
    for that keystroke takes: an editor asks both `textDocument/inlineCompletion` and
    `textDocument/completion` at each keystroke (VS Code with quick suggestions, Neovim with a
    completion plugin beside its inline ghost text). Each superseded the other, so the inline
    request answered RequestCancelled at every keystroke and no ghost text was ever shown; now the
    second takes the first one's run, and one model run answers both."""
    text: str
    offset: int
    task: asyncio.Task
    waiters: int = 0


class CompletionService:
    def __init__(self, host: ModelHost, trees: DocumentTrees) -> None:
        self.host = host
        self.trees = trees
        # (document, kind) -> the request denoising for it. A newer request supersedes an older one of
        # the same kind; a streamed and a plain request for one document run side by side (an editor
        # that draws native inline completions and streams refinements sends both per keystroke,
        # and the step scheduler runs them in the same steps).
        self._running: dict[tuple[str, bool], CancelToken] = {}
        self._closed_tokens: set[CancelToken] = set()   # cancelled because their document closed
        self._shown: dict[str, Completion] = {}       # the last completion answered, per document
        self._prefetch: dict[str, Prefetch] = {}
        self._plain: dict[str, SharedRun] = {}        # the plain run in flight, per document
        # The latest plain request per document, by ticket: one whose typed-through check ran in a
        # thread (a big document) answers only if no newer plain request came meanwhile.
        self._asked: dict[str, tuple[int, str, int]] = {}   # (ticket, text, cursor)
        self._tickets = itertools.count()
        self.counters = {"typedThroughHits": 0, "typedThroughRefused": 0, "prefetchStarted": 0, "prefetchHits": 0,
                         "rebased": 0, "dropped": 0, "rebasedRefused": 0, "heldBack": 0}

    async def complete(self, uri: str, position: types.Position, workspace: Workspace, options: Options,
                       on_step: StepCallback | None = None) -> Completion | None:
        snapshot, document, language_id = self.trees.get(uri, workspace)
        uri = unquote(uri)      # one document however the client spells it (as pygls keys it)
        if not options.planner.language_enabled(language_id):
            return None
        offset = offset_in_text(snapshot.text, position, document.position_codec)
        key = (uri, on_step is not None)
        # Streamed requests too: a streamed one typed through is answered at once, with no reports
        # (nothing to watch). They never were, and an editor that always streams (VS Code)
        # reran the model at every character typed through and at each word accepted: the ghost
        # text blinked and went blurry again before it sharpened into the same suggestion.
        ticket = next(self._tickets)
        self._asked[uri] = (ticket, snapshot.text, offset)
        reused = await self._typed_through(uri, snapshot, offset)
        latest = self._asked.get(uri)
        if latest is not None and latest[0] != ticket and (latest[1] != snapshot.text or latest[2] != offset):
            # A newer request at another keystroke came while a big document's check ran: it
            # answers (and its own reuse or run must not be cancelled by this one's). One for the
            # same keystroke (the other kind of request) shares this one's answer.
            raise Superseded("superseded by a newer request for the same document")
        if reused is not None:
            self._cancel_running(key)     # an older request must not answer after this one
            self.counters["typedThroughHits"] += 1
            return await self._settle(uri, reused, workspace)
        prefetched = self._prefetch.get(uri)
        if prefetched is not None:
            if prefetched.text == snapshot.text and prefetched.offset == offset:
                # Kept for the other request of this keystroke: an editor that streams sends a
                # plain and a streamed one, and a streamed request takes it too (it sees no steps,
                # only the answer): it is the run it would start, begun earlier. (Streamed requests
                # never took it, so every accept cost a second run.) The prefetch's own run
                # superseded any older request when it started.
                if not prefetched.taken:
                    # One hit per prefetched run: counted per request, an editor that streams (two
                    # requests a keystroke) had twice as many hits as prefetches started.
                    self.counters["prefetchHits"] += 1
                    prefetched.taken = True
                try:
                    completion = await asyncio.shield(prefetched.task)
                except Cancelled:
                    completion = None
                return await self._settle(uri, completion, workspace)
            del self._prefetch[uri]
            prefetched.task.cancel()
        if on_step is None:
            completion = await self._shared_run(uri, snapshot, offset, options)
        else:
            completion = await self._run(uri, snapshot, offset, options, on_step)
        return await self._settle(uri, completion, workspace)

    async def _shared_run(self, uri: str, snapshot: Snapshot, offset: int, options: Options) -> Completion | None:
        """The plain run for this keystroke: the one in flight when another plain request asked at
        the same version and cursor (SharedRun), else a new one, which supersedes the older run.
        It is cancelled when the last request waiting for it is."""
        shared = self._plain.get(uri)
        if shared is None or shared.task.done() or shared.text != snapshot.text or shared.offset != offset:
            task = asyncio.ensure_future(self._run(uri, snapshot, offset, options, None))
            shared = self._plain[uri] = SharedRun(snapshot.text, offset, task)
            task.add_done_callback(functools.partial(self._run_ended, uri, shared))
        shared.waiters += 1
        try:
            return await asyncio.shield(shared.task)
        finally:
            shared.waiters -= 1
            if shared.waiters == 0 and not shared.task.done():
                shared.task.cancel()       # its last request was cancelled: the run stops too

    def _run_ended(self, uri: str, shared: SharedRun, task: asyncio.Task) -> None:
        if self._plain.get(uri) is shared:
            del self._plain[uri]
        if not task.cancelled():
            task.exception()     # retrieved: each waiting request raised it already

    def options_changed(self) -> None:
        """Settings changed: nothing computed under the old ones is shown again (a suggestion a
        new `minConfidence` would hold back, a prefetched line longer than `maxLineTokens`)."""
        self._shown.clear()
        self._plain.clear()       # a run in flight keeps its requests, but a new one is not given it
        for prefetched in self._prefetch.values():
            prefetched.task.cancel()
        self._prefetch.clear()

    def document_changed(self, uri: str, before: str, snapshot: Snapshot, options: Options) -> None:
        """After an edit: if it inserted the last suggestion (accepted), compute the next one now."""
        uri = unquote(uri)
        shown = self._shown.get(uri)
        if shown is None or shown.snapshot.text != before:
            return
        accepted = before[:shown.start] + shown.text + before[shown.end:]
        if snapshot.text != accepted or not shown.text:
            return
        offset = shown.start + len(shown.text)
        old = self._prefetch.pop(uri, None)
        if old is not None:
            old.task.cancel()
        self.counters["prefetchStarted"] += 1
        task = asyncio.ensure_future(self._run(uri, snapshot, offset, options, None))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())   # a failed prefetch is nobody's error
        self._prefetch[uri] = Prefetch(snapshot.text, offset, task)

    def forget(self, uri: str) -> None:
        """The document closed: nothing of it is reused, and its running requests stop at their
        next step boundary (a document reopened meanwhile is another document to them)."""
        uri = unquote(uri)
        for streamed in (False, True):
            token = self._running.pop((uri, streamed), None)
            if token is not None:
                self._closed_tokens.add(token)
                token.cancel()
        self._shown.pop(uri, None)
        self._asked.pop(uri, None)
        prefetched = self._prefetch.pop(uri, None)
        if prefetched is not None:
            prefetched.task.cancel()

    async def _run(self, uri: str, snapshot: Snapshot, offset: int, options: Options,
                   on_step: StepCallback | None) -> Completion | None:
        key = (uri, on_step is not None)
        # Registered before the wait for a model load: a newer request or a didClose meanwhile
        # cancels it before it costs a run.
        token = self._supersede(key)
        try:
            # The model's positions cap the context budget: one engine plans and runs the request.
            engine = await self.host.ready_engine()
            # A big document's tree may still be parsing: waited for in the parse pool, not in a
            # worker of asyncio's default pool, where the plan below runs (documents.tree_ready)
            await tree_ready(snapshot)
            if token.cancelled:
                raise Cancelled()
            # Off the event loop: the first plan after big documents open indexes them for snippets
            # (seconds, for millions of characters), and every client's messages wait on the loop.
            completion_plan = await asyncio.to_thread(plan, snapshot, offset, options, self.trees.others(uri),
                                                      engine.denoiser.max_context, engine.denoiser.max_slot)
            if token.cancelled:
                raise Cancelled()
            place = functools.partial(self._placed, uri, token, snapshot.text, completion_plan.span.after_cursor)
            step = None if on_step is None else (lambda state: on_step(completion_plan, state, place))
            result = await self.host.run_plan(completion_plan, token, step, engine=engine)
            if token.cancelled:      # cancelled between its last step and here: its answer is stale
                raise Cancelled()
        except Cancelled:
            if token in self._closed_tokens:
                raise JsonRpcRequestCancelled("the document was closed") from None
            raise Superseded("superseded by a newer request for the same document") from None
        except asyncio.CancelledError:
            token.cancel()
            raise
        finally:
            self._closed_tokens.discard(token)
            if self._running.get(key) is token:
                del self._running[key]
        # Post-processing reparses the edited document (incrementally, from its tree: 10-45 ms at
        # 1.3 M characters), which every client's messages waited for on the loop: in a thread above
        # SYNC_PARSE_BYTES, where it costs more than the hop (documents.with_tree)
        completion, held_back = await with_tree(snapshot, _finish, completion_plan, result)
        if held_back:
            self.counters["heldBack"] += 1       # shown but for the confidence gate
        return completion

    async def _typed_through(self, uri: str, snapshot: Snapshot, offset: int) -> Completion | None:
        """The last suggestion, moved over what the user typed of it, or None. It was checked on
        the version it was made on: it is checked again here as a fresh completion at this place
        would be (Completion.passes_finish), or the model runs (`typedThroughRefused`). Moving it
        (its import is placed in this version's tree) and the check read the tree: for a big
        document in a thread (documents.with_tree), never on the loop."""
        shown = self._shown.get(uri)
        if shown is None:
            return None
        after = shown.span.after_cursor       # a `{ | }` body's range goes on past the cursor
        moved = rebase(shown.text, shown.start, shown.end, shown.snapshot.text, snapshot.text, after)
        if moved is None or moved.typed_through == 0 or moved.end - after != offset:
            return None
        completion = await with_tree(snapshot, _moved_if_it_passes, shown, moved.start, moved.end, snapshot)
        if completion is None:
            self.counters["typedThroughRefused"] += 1
        return completion

    async def _settle(self, uri: str, completion: Completion | None, workspace: Workspace) -> Completion | None:
        """The completion on the document as it is now (moved when exact, else dropped)."""
        if completion is None:
            self._shown.pop(uri, None)
            return None
        try:
            current = self.trees.get(uri, workspace)[0]
        except Exception:        # closed meanwhile: nothing to show it in
            self._shown.pop(uri, None)
            return None
        if current.text != completion.snapshot.text:
            moved = rebase(completion.text, completion.start, completion.end, completion.snapshot.text, current.text,
                           completion.span.after_cursor)
            if moved is None:
                self.counters["dropped"] += 1
                self._shown.pop(uri, None)
                return None
            # Checked again where it lands, as typed-through reuse is: the edit may have made the
            # text wrong there though it moved exactly (a name it calls renamed above, a bracket
            # it closes now closed by the user).
            completion = await with_tree(current, _moved_if_it_passes, completion, moved.start, moved.end, current)
            if completion is None:
                self.counters["dropped"] += 1
                self.counters["rebasedRefused"] += 1
                self._shown.pop(uri, None)
                return None
            self.counters["rebased"] += 1
        self._shown[uri] = completion
        return completion

    def _placed(self, uri: str, token: CancelToken, old: str, after_cursor: int, text: str, start: int,
                end: int) -> tuple[str, int, int] | None:
        """A streamed refinement ([start, end) of `old` replaced by `text`; the range's last
        `after_cursor` characters lie after the cursor) on the document as it is now, moved as the
        final answer would be (rebase: exact or not at all); None once its
        request was cancelled, superseded or its document closed (its answer is an error, and no
        report may follow a reply)."""
        if token.cancelled:
            return None
        current = self.trees.text_of(uri)
        if current is None:
            return None
        moved = rebase(text, start, end, old, current, after_cursor)
        return None if moved is None else (current, moved.start, moved.end)

    def _supersede(self, key: tuple[str, bool]) -> CancelToken:
        self._cancel_running(key)
        token = self._running[key] = CancelToken()
        return token

    def _cancel_running(self, key: tuple[str, bool]) -> None:
        previous = self._running.pop(key, None)
        if previous is not None:
            previous.cancel()


def _moved_if_it_passes(shown: Completion, start: int, end: int, snapshot: Snapshot) -> Completion | None:
    completion = shown.moved(start, end, snapshot)
    return completion if completion.passes_finish() else None


def _finish(completion_plan: CompletionPlan, result) -> tuple[Completion | None, bool]:
    """The completion to show for `result`, and whether the confidence gate alone held one back."""
    completion = completion_plan.finish(result)
    held_back = (completion is None and completion_plan.min_confidence is not None
                 and completion_plan.finish(result, gate=False) is not None)
    return completion, held_back

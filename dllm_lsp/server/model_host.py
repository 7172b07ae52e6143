"""Owns the loaded models: loads them off the event loop, shares them between connections
(each uses the model its options name; at most `max_models` at once), runs infills on worker
threads (the engine's step scheduler batches them), remembers why a load failed, and loads a
model folder again when its files have changed since (a newer checkpoint trained into it)."""
from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import os
import time
import traceback
from pathlib import Path
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from dllm_lsp.cli_errors import one_line
from dllm_lsp.engine.batching import DEFAULT_MAX_BATCH, DEFAULT_SLACK
from dllm_lsp.engine.engine import CancelToken, Engine, out_of_memory
from dllm_lsp.engine.types import CacheSettings, DecodeSettings, InfillRequest, InfillResult, StepState
from dllm_lsp.pipeline import CompletionPlan
from dllm_lsp.loader import ModelLoadError, load_model, resolve_device, resolve_model_path, shipped_model_names
from dllm_lsp.model_folder import FolderStamp, folder_stamp

log = logging.getLogger(__name__)


LOAD_WAIT_S = 300.0   # how long a request waits for a load in progress (a 7B checkpoint from disk)


class ModelUnavailable(Exception):
    """No model is loaded: it failed to load (the message says why) or none was asked for."""


class FilesChanged(ModelLoadError):
    """A model folder's files changed while they loaded: what was read may be half of each."""


@dataclass
class LoadKey:
    model: str
    device: str
    resolved: bool = field(default=True, compare=False)   # False: the pair names no folder or device
    # What dllm/status calls the model until it is loaded: its folder's name, as the loaded model
    # calls itself, even when the device does not resolve (empty: `model`)
    name: str = field(default="", compare=False)
    # The pair names a folder that is not there at this instant (`resolved` is False): keyed by
    # the path it would have, so a model loaded from that path is the one it means.
    missing: bool = field(default=False, compare=False)

    @classmethod
    def of(cls, model: str, device: str) -> "LoadKey":
        """The key of what a (model, device) pair loads: the model folder's real path and the device
        it resolves to, so `auto` and `cpu`, or `default` and the default's name, share one load and
        one of the `max_models` slots. A pair that does not resolve keeps its words (its load fails
        and says why), except a folder path that is missing now: it keeps the path it would resolve
        to (`missing`). `dllm-lsp train` renames a new model folder into place in two steps, and the
        GPU job's unpack removes a folder before it copies the new one in: a connection asking in
        between got a key of its words, unlike the loaded model's, and a failed load ("does not
        exist") instead of the model loaded from that very path."""
        try:
            dev = resolve_device(device)
        except ModelLoadError:
            dev = None
        if dev is not None and dev.type == "cuda" and dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        try:
            folder = resolve_model_path(model, dev.type if dev is not None else _device_type(device)).resolve()
        except (ModelLoadError, OSError):
            folder = None
        if dev is not None and folder is None:
            missing = _missing_folder(model)
            if missing is not None:
                return cls(str(missing), str(dev), resolved=False, name=model, missing=True)   # named as asked
        if dev is None or folder is None:
            return cls(model, device, resolved=False, name=folder.name if folder is not None else model)
        return cls(str(folder), str(dev), name=folder.name)


def _missing_folder(model: str) -> Path | None:
    """The real path `model` would name, when it is a folder path with nothing there now (a link
    included whose target is gone, as a folder renamed away leaves it); None for `default`, a
    shipped model's name, or a path that exists (not a folder, say: its load says why)."""
    if model in ("", "default") or model in shipped_model_names():
        return None
    try:
        path = Path(model).expanduser()
        return None if path.exists() else path.resolve()
    except (OSError, RuntimeError, ValueError):   # a name the file system refuses, a link loop, a NUL
        return None


def _device_type(device: str) -> str | None:
    """The kind of device the words name (`cuda` of a `cuda:7` this machine lacks), for the model
    `default` means there; None when they name none (the default of CPUs, then)."""
    try:
        return torch.device(device).type
    except (RuntimeError, TypeError):
        return None


def local_engine(model: str, device: str, batching: bool = True, prefix_cache: int | None = None,
                 step_slack: float | None = None, context_in_first_step: bool = True,
                 warm_up: bool = True, cuda_graphs: bool = False) -> Engine:
    """`prefix_cache`: context caches the embedded model keeps (None: its default; 0: none).
    `step_slack`: the step scheduler's cost bound (None: its default; engine/batching.py).
    `context_in_first_step`: False makes the embedded model compute a request's uncached context
    in a pass of its own as the request starts (a baseline; arch/embedded_denoiser.py).
    `warm_up`: the engine is prepared (`Engine.prepare`: warm-up and step-cost probe) before it
    is returned, so the load a request waits for includes them and its first completion does not.
    `cuda_graphs`: a lone request's steady steps replay from CUDA graphs (`use_cuda_graphs`)."""
    engine = Engine(load_model(model, device), batching=batching,
                    step_slack=DEFAULT_SLACK if step_slack is None else step_slack)
    if prefix_cache is not None and hasattr(engine.denoiser, "prefix_cache_entries"):
        engine.denoiser.prefix_cache_entries = prefix_cache
    if hasattr(engine.denoiser, "context_in_first_step"):
        engine.denoiser.context_in_first_step = context_in_first_step
    use_cuda_graphs(engine, cuda_graphs)
    if warm_up:
        cannot_run = None
        try:
            engine.prepare()
        except Exception as exc:   # noqa: BLE001 - sorted here: out of memory, or a model that cannot run
            if out_of_memory(exc):
                # A smaller request may fit: served, and each request reports its own error.
                log.warning("preparing %s on %s ran out of memory (%s: %s); serving without a warm-up",
                            engine.denoiser.name, engine.denoiser.device, type(exc).__name__, one_line(exc))
            else:
                # The model itself cannot run (a shape its loaded weights agree with but its forward
                # pass does not, say): every completion would fail the same way, so the load fails
                # with it. It used to be served, `loaded` in dllm/status, and each request failed.
                # The stack as text: a record holding the traceback (exc_info) holds the model too,
                # in any handler that keeps records.
                log.error("preparing %s on %s failed:\n%s", engine.denoiser.name, engine.denoiser.device,
                          "".join(traceback.format_exception(exc)).rstrip())
                cannot_run = (f"{engine.denoiser.name} cannot run on {engine.denoiser.device}: its first forward pass "
                              f"(the warm-up) failed with {type(exc).__name__}: {one_line(exc)}")
        if cannot_run is not None:
            # Raised out here, from no exception and with the engine dropped: the failed load's
            # error is kept (dllm/status) while a connection asks for the model, and the warm-up's
            # traceback, through its frames, kept the whole model in memory with it.
            engine.close()
            del engine
            raise ModelLoadError(cannot_run)
    return engine


def use_cuda_graphs(engine: Engine, wanted: bool) -> None:
    """Turn on CUDA-graph replay of steady steps where the model has it (the embedded model); on a
    CPU it changes nothing but bookkeeping, so it is left off there."""
    if hasattr(engine.denoiser, "cuda_graphs"):
        engine.denoiser.cuda_graphs = bool(wanted) and engine.denoiser.device.type == "cuda"


def _lexical(path: str) -> str:
    """`path` made absolute and normalised by its spelling alone: nothing on disk is looked at."""
    return os.path.normpath(os.path.join(os.getcwd(), path))


def _same_device(a: str, b: str) -> bool:
    """Whether two device words name one device (`auto` and what it picks, `cuda` and `cuda:0`).
    Words that do not resolve are compared as written."""
    if a == b:
        return True
    try:
        first, second = resolve_device(a), resolve_device(b)
    except ModelLoadError:
        return False
    if first.type == "cuda" and first.index is None:
        first = torch.device("cuda", torch.cuda.current_device())
    if second.type == "cuda" and second.index is None:
        second = torch.device("cuda", torch.cuda.current_device())
    return first == second


MODEL_REFUSED = ("model refused: a client of this TCP server may name a shipped model ({shipped}), "
                 "the server's own model (serve --model, or `default`), or a model folder, by its absolute path, under a "
                 "directory the server's operator allows (serve --allow-model-dir); the model in use is kept")


@dataclass(frozen=True)
class ModelChoices:
    """The models and devices a remote (TCP) client may ask for in its `model` and `device` options.

    A TCP client's `model` option named any folder on the server's disk, and the load's errors
    told a file from a folder from nothing: anyone who could connect could probe the server's
    files. A client may name a shipped model, the operator's model (`serve --model`,
    as spelt there or as the same absolute path) or a folder under one of `roots` (`serve
    --allow-model-dir`, or the folder itself), by an absolute path without `..`. Anything else gets `MODEL_REFUSED`,
    the same words whatever the path is, and the path is judged by its spelling alone (nothing
    on disk is touched: no stat, no resolve). Folders under a root are the operator's: a link
    placed in one is followed when the model loads.

    Devices: only the operator's (`serve --device`, however spelt). A client asking for another
    GPU, or for the CPU of a GPU server, would load a second copy of a model there, beside the
    ones the operator sized the server for.

    A stdio server has none: the user's own editor may load any folder of the user's machine.
    """

    model: str
    device: str
    roots: tuple[str, ...] = ()       # lexical absolute paths, and their resolved form, of the allowed folders

    @classmethod
    def of(cls, model: str, device: str, roots: Iterable[str | os.PathLike] = ()) -> "ModelChoices":
        """The operator's choices. `roots` are resolved here (the operator's own paths, read once at
        start-up) and kept in both spellings, so `/srv/models` allows a client's path through the
        link `/srv/models` and through the folder it points at."""
        spellings: list[str] = []
        for root in roots:
            for spelt in (_lexical(os.path.expanduser(os.fspath(root))), os.path.realpath(os.path.expanduser(os.fspath(root)))):
                if spelt not in spellings:
                    spellings.append(spelt)
        return cls(model, device, tuple(spellings))

    def model_refusal(self, model: str) -> str | None:
        """None when a client may name `model`; else the one refusal every refused path gets."""
        if model == self.model or model in shipped_model_names():
            return None
        if os.path.isabs(model) and ".." not in Path(model).parts:
            where = _lexical(model)
            if where == _lexical(os.path.expanduser(self.model)):
                return None
            if any(where == root or where.startswith(root.rstrip(os.sep) + os.sep) for root in self.roots):
                return None
        log.warning("refused a TCP client's model option %r: not a model this server offers", model[:300])
        return MODEL_REFUSED.format(shipped=", ".join(shipped_model_names()) or "none")

    def device_refusal(self, device: str) -> str | None:
        if _same_device(device, self.device):
            return None
        return (f"device {device[:40]!r} refused: this TCP server runs its models on {self.device!r} (serve --device), "
                "and its clients may not choose another; the device in use is kept")


DEFAULT_MAX_MODELS = 2   # models one server holds at once (connections asking for others share them)


@dataclass(frozen=True)
class Refusal:
    """A model a connection asked for that did not fit (max_models): asked again at its next request."""

    model: str
    device: str
    why: str


@dataclass(eq=False)
class Slot:
    """One loaded (or loading) model and the connections using it."""

    key: LoadKey
    loading: asyncio.Future
    asked: tuple[str, str] = ("", "")   # the (model, device) words the load was started with
    engine: Engine | None = None
    error: str | None = None
    users: set[int] = field(default_factory=set)
    last_used: float = 0.0
    failed_at: float = 0.0
    started: float = field(default_factory=time.monotonic)   # when the load began: requests wait from here
    close_pending: bool = False   # evicted: its engine is closed once loaded, unless asked for again first
    # The model files' identity (model_folder.folder_stamp) when the load began; None for what is
    # not a folder here (a remote deployment), which is never loaded again for its files.
    stamp: FolderStamp | None = None
    # A load of the folder's newer files (they changed since this one loaded): this one serves
    # until it has loaded, and keeps serving when it fails (its error says why).
    successor: "Slot | None" = None

    def loading_seconds(self) -> float | None:
        """How long the load has been running; None once it has ended."""
        return None if self.loading.done() else time.monotonic() - self.started

    @property
    def failed(self) -> bool:
        return self.loading.done() and self.engine is None

    @property
    def why(self) -> str | None:
        """Why the load failed (read from the load itself: its done-callback may not have run yet)."""
        if self.error or not self.loading.done():
            return self.error
        if self.loading.cancelled():
            return "the load was cancelled"
        exc = self.loading.exception()
        return str(exc) if exc is not None else None


class ModelHost:
    """The models of a server, shared by all its connections.

    Each connection (a `HostView`, `view()`) uses the model its own options name; connections
    naming the same (model, device) share one load and one engine, so one client's options
    never change another's model. At most `max_models` are held: loading another evicts the
    least recently used model no connection uses any more, and is refused with a clear error
    when every held model is in use (memory stays bounded by max_models models).

    `connect(model, device)` makes an engine (default: load the model here). `workers` is how
    many infills may be in flight at once: the engine's step scheduler lets concurrent requests
    share denoising steps (engine/batching.py), and a remote engine (a Ray Serve deployment,
    dllm_lsp/serving) spreads them over its replicas. Calls without a user act for user 0 (the
    CLI, tests, a stdio server).
    """

    def __init__(self, connect: Callable[[str, str], Engine] = local_engine,
                 workers: int = DEFAULT_MAX_BATCH, max_models: int = DEFAULT_MAX_MODELS,
                 key_of: Callable[[str, str], LoadKey] = LoadKey.of,
                 retry_failed_s: float | None = None) -> None:
        self._connect = connect
        self._key_of = key_of        # what a (model, device) pair loads: pairs with one key share it
        self.retry_failed_s = retry_failed_s   # a failed load is started again this long after (None: never)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dllm-model")
        self.max_models = max(1, max_models)
        self._slots: dict[tuple[str, str], Slot] = {}
        self._uses: dict[int, Slot] = {}
        self._refused: dict[int, Refusal] = {}   # user -> the model that did not fit (max_models)
        # Evicted while still loading (a client changed its mind mid-load): their loads run on, and
        # one asked for again before it ends is taken back, not loaded a second time beside it.
        self._retiring: dict[tuple[str, str], Slot] = {}
        self._latency: dict[int, float] = {}     # user -> its last completion's latency
        self._ids = itertools.count(1)
        self.load_wait_s = LOAD_WAIT_S
        self._pinned: LoadKey | None = None

    def pin(self, model: str, device: str) -> None:
        """The operator's model (`serve --model`): never evicted to make room for a client's. Two
        clients naming other models took it away, and every client with default options was
        then refused."""
        self._pinned = self._key_of(model, device)

    def view(self) -> "HostView":
        """A connection's handle: its own model choice over the shared pool."""
        return HostView(self, next(self._ids))

    # -- per user -------------------------------------------------------------------------------

    def _slot(self, user: int) -> Slot | None:
        """`user`'s slot. One whose load failed is left for the same model's newer load, started
        since by another connection (the folder fixed): the user had kept the old error, every
        request refused, while that connection used the model. Not while the user waits for room
        for another model (its options name that one)."""
        slot = self._uses.get(user)
        if slot is not None and slot.failed and user not in self._refused:
            newer = self._slots.get((slot.key.model, slot.key.device))
            if newer is not None and newer is not slot and not newer.failed:
                self._use(user, newer)
                return newer
        return slot

    def engine_of(self, user: int = 0) -> Engine | None:
        slot = self._slot(user)
        return slot.engine if slot is not None else None

    @property
    def engine(self) -> Engine | None:
        return self.engine_of(0)

    def is_loading(self, user: int = 0) -> bool:
        """Whether `user`'s model is loading, or its folder's newer files are (the model loaded
        before serves meanwhile)."""
        slot = self._slot(user)
        return slot is not None and self._loading_slot(slot) is not None

    @staticmethod
    def _loading_slot(slot: Slot) -> Slot | None:
        """The load under way for `slot`: its own, or its successor's; None when neither runs."""
        if not slot.loading.done():
            return slot
        if slot.successor is not None and not slot.successor.loading.done():
            return slot.successor
        return None

    @property
    def loading(self) -> bool:
        return self.is_loading(0)

    def needs_load(self, model: str, device: str, user: int = 0) -> bool:
        """Whether `user`'s options, naming `model` on `device`, need a load. Options that name the
        model it has end any wait for another one that did not fit."""
        slot = self._slot(user)
        if slot is None or slot.key != self._key_of(model, device) or slot.failed or self._files_changed(slot):
            return True
        self._refused.pop(user, None)
        return False

    def _stamp(self, key: LoadKey) -> FolderStamp | None:
        return folder_stamp(key.model) if key.resolved else None

    def _files_changed(self, slot: Slot) -> bool:
        """Whether `slot`, a loaded model, was loaded from other files than its folder holds now
        (a newer checkpoint trained or unpacked into it; a folder half-written counts: its load
        fails, and this one serves on). A stat per model file, nothing read. Asked when a
        connection asks for the model (its options, sent again or by a new connection): the same
        options had kept the first weights for the server's life.

        A folder that cannot be listed now (gone: between `train`'s two renames, or removed by the
        GPU job's unpack before its copy) has not changed: it is being replaced, and a load of
        nothing could only fail. The model loaded from it serves on, with nothing to say; the files
        that come back are compared when the model is next asked for."""
        if slot.engine is None or slot.stamp is None:
            return False
        now = self._stamp(slot.key)
        if now is None:
            return False
        if now != slot.stamp:
            return True
        if slot.successor is not None and slot.successor.loading.done():
            slot.successor = None       # the files are back as this one loaded them: nothing to tell
        return False

    def start_load(self, model: str, device: str, user: int = 0) -> asyncio.Future:
        """Start loading `model` on `device` for `user` now (synchronously: a request arriving right
        after sees the load in progress and waits for it). A model already loaded or loading is
        shared, not loaded again. Raises ModelUnavailable when it would exceed max_models: the
        user then keeps the model it had, if any, and its next request asks again (ready_engine),
        so it switches as soon as another connection's model is let go."""
        key = self._key_of(model, device)
        slot = self._slots.get((key.model, key.device))
        if key.missing and slot is not None and slot.engine is not None:
            log.info("the model folder %s is not there now (being replaced?): the model loaded from it serves on",
                     key.model)
        if slot is not None and self._files_changed(slot):
            self._use(user, slot)        # served by the model loaded before until the new files have loaded
            return self._reload(slot, model, device).loading
        if slot is None and (key.model, key.device) in self._retiring:
            # Switching back and forth while the loads run (a user trying models, typing): each
            # switch started another load of the same model beside those still running (20
            # switches, 16 loads at once, in a server of one model).
            try:
                self._make_room(user)
            except ModelUnavailable as exc:
                self._refused[user] = Refusal(model, device, str(exc))
                raise
            slot = self._retiring.pop((key.model, key.device))
            slot.users.clear()           # its users were moved off when it was evicted
            self._slots[(key.model, key.device)] = slot
        if slot is None or slot.failed:
            if slot is not None:
                del self._slots[(key.model, key.device)]    # a failed load is replaced
            if key.resolved:
                # A folder that failed before may load now (the user fixed it): it needs room like
                # any other. Replaced in place, it had loaded beside max_models models in use.
                # A pair that names no folder or device fails at once and holds no memory: it
                # takes no one's room.
                try:
                    self._make_room(user)
                except ModelUnavailable as exc:
                    self._refused[user] = Refusal(model, device, str(exc))
                    raise
            stamp = self._stamp(key)
            slot = Slot(key, asyncio.ensure_future(self._load(model, device, key, stamp)), (model, device), stamp=stamp)
            self._slots[(key.model, key.device)] = slot
            slot.loading.add_done_callback(lambda f, s=slot: self._loaded(s, f))
        self._use(user, slot)
        return slot.loading

    def _reload(self, slot: Slot, model: str, device: str) -> Slot:
        """Load `slot`'s folder again, its files having changed: the successor's load, or the one
        already under way. It takes no seat of `max_models`: it replaces `slot`, which serves until
        it has loaded (both are held meanwhile, as any replacing load holds the old and the new)
        and is then retired as an evicted model is. A load that fails (a folder half-written, gone,
        or changed again while it loaded) replaces nothing: `slot` serves on, and its connections
        are told why (dllm/status `error`; the window message of the options that asked); asked
        again, it is tried again."""
        successor = slot.successor
        if successor is not None and not successor.loading.done():
            return successor
        stamp = self._stamp(slot.key)
        log.info("the model files of %s changed since it loaded: loading them (the model loaded before "
                 "serves meanwhile)", Path(slot.key.model).name)
        successor = Slot(slot.key, asyncio.ensure_future(self._load(model, device, slot.key, stamp, replacing=True)),
                         (model, device), stamp=stamp)
        slot.successor = successor
        successor.loading.add_done_callback(lambda f, s=successor: self._loaded(s, f))
        successor.loading.add_done_callback(lambda f, old=slot, new=successor: self._promote(old, new))
        return successor

    def _promote(self, old: Slot, new: Slot) -> None:
        """`new`, the load of `old`'s changed files, has ended: loaded, it takes `old`'s place and
        connections, and `old` is retired (its engine closed once its requests in hand are done).
        Failed, it stays `old.successor` to say why `old` still serves."""
        if old.successor is not new or new.engine is None:
            return                      # failed; or let go with `old` (evicted: `_retire`)
        where = (old.key.model, old.key.device)
        old.successor = None
        if self._slots.get(where) is not old:
            self._retire(new)           # not expected: whatever holds the place now keeps it
            return
        self._slots[where] = new
        for user in old.users:
            self._uses[user] = new
        new.users, old.users = old.users, set()
        new.last_used = old.last_used
        log.info("now serving the new files of %s; the model loaded before is let go", Path(old.key.model).name)
        self._retire(old)

    async def load(self, model: str, device: str, user: int = 0) -> Engine:
        """Load `model` on `device` for `user`. Raises ModelLoadError or ModelUnavailable."""
        return await asyncio.shield(self.start_load(model, device, user))

    def release(self, user: int) -> None:
        """`user` stops using its model, which stays loaded until another one needs the room. A
        failed load nobody uses any more is forgotten: every model name that failed stayed, with
        its error, for the server's life (a client's distinct names grew it without bound)."""
        slot = self._uses.pop(user, None)
        if slot is not None:
            slot.users.discard(user)
            if slot.failed and not slot.users and self._slots.get((slot.key.model, slot.key.device)) is slot:
                del self._slots[(slot.key.model, slot.key.device)]

    def disconnect(self, user: int) -> None:
        """The connection closed: its model is released and nothing of it is kept."""
        self.release(user)
        self._refused.pop(user, None)
        self._latency.pop(user, None)

    def _use(self, user: int, slot: Slot) -> None:
        self.release(user)
        self._refused.pop(user, None)
        slot.users.add(user)
        slot.last_used = time.monotonic()
        self._uses[user] = slot

    def _make_room(self, user: int) -> None:
        """Evict models no other connection uses (the least recently used first) until one more
        fits. A model `user` itself is still loading may go too (a client that changes its mind
        mid-load): its load finishes on its thread and is then let go. Failed loads hold no seat:
        those no connection uses are dropped, the others keep telling their connections why."""
        mine = self._uses.get(user)

        def idle(slot: Slot) -> bool:
            if self._pinned is not None and (slot.key.model, slot.key.device) == (self._pinned.model, self._pinned.device):
                return False
            return not (slot.users - {user}) and (slot.loading.done() or slot is mine)
        while sum(not s.failed for s in self._slots.values()) >= self.max_models:
            # Failed loads hold no seat: evicting one made no room, and took its error away from
            # the connection it was telling why it has no model ("not loaded yet" instead).
            candidates = [s for s in self._slots.values() if not s.failed and idle(s)]
            if not candidates:
                # Names only: a model's path is another client's business.
                # A load in progress is not evicted even when the connection that asked for it has
                # gone (loads beside it would overrun the memory bound): said so, since "in use"
                # alone sent the user looking for another client while a load ran (or hung).
                held = ", ".join(f"{Path(s.key.model).name} on {s.key.device}"
                                 + ("" if s.loading.done() else " (still loading)")
                                 for s in self._slots.values() if not s.failed)
                raise ModelUnavailable(
                    f"this server holds at most {self.max_models} model(s) ({held}), all in use by other "
                    "connections or still loading: use one of them, or start the server with a larger --max-models"
                    + (f" (this connection goes on with {Path(mine.key.model).name} until one is free)"
                       if mine is not None and mine.engine is not None else ""))
            victim = min(candidates, key=lambda s: (s is not mine, s.last_used))
            del self._slots[(victim.key.model, victim.key.device)]
            for u in list(victim.users):
                self._uses.pop(u, None)
            log.info("unloading %s on %s to make room", victim.key.model, victim.key.device)
            self._retire(victim)
        for slot in [s for s in self._slots.values() if s.failed and not s.users]:
            del self._slots[(slot.key.model, slot.key.device)]

    def _retire(self, slot: Slot) -> None:
        """Let an evicted model go: its engine is closed once its requests in hand are done (the
        step scheduler's thread holds the model; nothing else does once the slot is dropped), so
        its memory comes back instead of staying behind every evicted model. One still loading
        waits in `_retiring` until its load ends, in case it is asked for again meanwhile."""
        where = (slot.key.model, slot.key.device)
        successor, slot.successor = slot.successor, None
        if successor is not None and not successor.loading.done():
            self._retire(successor)     # the load of its newer files goes with it (taken back if asked for)
        if not slot.loading.done():
            self._retiring[where] = slot
        if slot.close_pending:
            return                      # evicted, taken back and evicted again while it loads
        slot.close_pending = True

        def close(future: asyncio.Future) -> None:
            slot.close_pending = False
            if self._retiring.get(where) is slot:
                del self._retiring[where]
            if self._slots.get(where) is slot:
                return                  # taken back while it loaded: in use again
            if future.cancelled() or future.exception() is not None:
                return
            close_engine = getattr(future.result(), "close", None)   # a remote engine holds no model here
            if close_engine is not None:
                self._executor.submit(close_engine)
        slot.loading.add_done_callback(close)

    def _loaded(self, slot: Slot, future: asyncio.Future) -> None:
        if future.cancelled():
            slot.error = "the load was cancelled"
        elif future.exception() is not None:
            slot.error = str(future.exception())
        else:
            slot.engine = future.result()
        if slot.engine is None:
            slot.failed_at = time.monotonic()

    async def _load(self, model: str, device: str, key: LoadKey | None = None, stamp: FolderStamp | None = None,
                    replacing: bool = False) -> Engine:
        """The load of `model` on `device`; `stamp`: its folder's files when it began (checked
        again once it has loaded). `replacing`: the load of a loaded model's changed files, whose
        error says that the model loaded before serves on."""
        loop = asyncio.get_running_loop()
        try:
            try:
                return await loop.run_in_executor(self._executor, self._load_blocking, model, device, key, stamp,
                                                  replacing)
            except ModelLoadError:
                raise
            except Exception as exc:  # anything unexpected still leaves the server running
                raise ModelLoadError(f"{type(exc).__name__}: {exc}") from exc
        except FilesChanged:
            raise
        except ModelLoadError as exc:
            if not replacing:
                raise
            raise ModelLoadError(f"the model files of {Path(key.model).name} changed, but the new ones did not load "
                                 f"({exc}); the model loaded before them is still served") from None

    def _load_blocking(self, model: str, device: str, key: LoadKey | None = None,
                       stamp: FolderStamp | None = None, replacing: bool = False) -> Engine:
        start = time.perf_counter()
        engine = self._connect(model, device)
        if stamp is not None and self._stamp(key) != stamp:
            # The files changed while they were read (a checkpoint being written or unpacked into
            # the folder): the model may be half one and half the other, and is not served.
            close = getattr(engine, "close", None)
            if close is not None:
                close()
            del engine
            served = "the model loaded before them is still served" if replacing else "the model is not served"
            raise FilesChanged(f"the model files of {Path(key.model).name} changed while they loaded (still being "
                               f"written?): {served}; they load when asked for again (the options sent again, or "
                               "a new connection) once they are written")
        prepared = getattr(engine, "prepared", None)
        log.info("loaded %s on %s in %.2fs%s", engine.denoiser.name, engine.denoiser.device, time.perf_counter() - start,
                 f" (warm-up and step-cost probe: {prepared['seconds']:.2f}s)" if prepared else "")
        return engine

    async def ready_engine(self, user: int = 0) -> Engine:
        """`user`'s engine, waiting for a load in progress (up to `load_wait_s`); ModelUnavailable
        when there is none, the load failed, or it takes longer than that. A model that did not
        fit when the user asked for it is asked for again first (room may have been made since)."""
        refused = self._refused.get(user)
        if refused is not None:
            try:
                self.start_load(refused.model, refused.device, user)
            except ModelUnavailable:
                pass            # still no room: the model it had, if any, serves it meanwhile
        slot = self._slot(user)
        if (slot is not None and slot.failed and self.retry_failed_s is not None
                and time.monotonic() - slot.failed_at >= self.retry_failed_s):
            # A load that may succeed later on its own (a Ray deployment not up yet): tried again.
            self.start_load(*slot.asked, user)
            slot = self._slot(user)
        if slot is not None and not slot.loading.done():
            # Counted from the load's start, not this request's: a load that hangs (a stuck disk)
            # made every request wait the whole limit again, forever; past it they are told at once.
            left = self.load_wait_s - (time.monotonic() - slot.started)
            try:
                if left <= 0:
                    raise asyncio.TimeoutError
                await asyncio.wait_for(asyncio.shield(slot.loading), timeout=left)
            except asyncio.TimeoutError:
                raise ModelUnavailable(
                    f"the model is still loading after {time.monotonic() - slot.started:.0f} s (a request waits "
                    f"for a load up to {self.load_wait_s:.0f} s from its start); try again when dllm/status says "
                    "loaded, or restart the server if it never does") from None
            except Exception:
                pass
        if slot is None or slot.engine is None:
            reason = (slot.why if slot is not None and slot.why else
                      refused.why if refused is not None else "the model has not been loaded yet")
            raise ModelUnavailable(f"no model loaded: {reason}")
        slot.last_used = time.monotonic()
        return slot.engine

    async def infill(
        self,
        request: InfillRequest,
        settings: DecodeSettings,
        cancel: CancelToken,
        on_step: Callable[[StepState], None] | None = None,
        *,
        context_tokens: int | None = None,
        cache: CacheSettings = CacheSettings(),
        user: int = 0,
        engine: Engine | None = None,
    ) -> InfillResult:
        """Run one infill on the worker thread with this request's own options (the engine is
        shared by every connection and never reconfigured): on `engine`, the one the request was
        sized for, else `user`'s. If the awaiting task is cancelled, the loop is told to stop at
        its next step boundary before the cancellation propagates."""
        if engine is None:
            engine = await self.ready_engine(user)
        run = functools.partial(engine.infill, request, settings, cancel, on_step,
                                context_tokens=context_tokens, cache=cache)
        return await self._run(run, cancel, user)

    async def run_plan(self, plan: CompletionPlan, cancel: CancelToken,
                       on_step: Callable[[StepState], None] | None = None, user: int = 0,
                       engine: Engine | None = None) -> InfillResult:
        """Run a completion plan (its request, decode settings, budget and cache mode) on `engine`,
        the one it was planned for (its positions bound the plan), else `user`'s engine. A
        connection whose model changes meanwhile gets the new one from its next request on."""
        if engine is None:
            engine = await self.ready_engine(user)
        return await self._run(functools.partial(plan.run, engine, cancel, on_step), cancel, user)

    async def _run(self, call: Callable[[], InfillResult], cancel: CancelToken, user: int) -> InfillResult:
        future = asyncio.get_running_loop().run_in_executor(self._executor, call)
        try:
            result = await future
        except asyncio.CancelledError:
            cancel.cancel()
            raise
        except ModelLoadError as exc:   # a remote engine whose deployment or cluster went away
            raise ModelUnavailable(str(exc)) from None
        self._latency[user] = result.latency_ms
        return result

    def status(self, user: int = 0) -> dict:
        slot = self._slot(user)
        engine = slot.engine if slot is not None else None
        # Not loaded (loading, or the load failed): the model and device it was asked for, named as
        # a loaded one would be; a bad device left `model: "default"`, not which model that means
        info = engine.denoiser.describe() if engine else (
            {"name": slot.key.name or slot.key.model, "device": slot.key.device} if slot else {})
        local = engine if isinstance(engine, Engine) else None   # a remote (Ray) engine keeps its counters
        loading = self._loading_slot(slot) if slot is not None else None   # its own load, or its new files'
        loading_for = loading.loading_seconds() if loading is not None else None
        # A loaded model whose folder's newer files did not load serves on: the error says why.
        newer = slot.successor if slot is not None else None
        # A remote engine (a Ray Serve deployment) whose cluster or deployment cannot serve now says
        # why; its front keeps it and serves again once the cluster is back (it said loaded: true).
        down = getattr(engine, "unavailable", None)
        return {
            "model": info.get("name"),
            "family": info.get("family"),
            "device": info.get("device"),
            "loaded": engine is not None and down is None,
            "loading": loading is not None,
            "loadingSeconds": round(loading_for, 1) if loading_for is not None else None,
            "error": (down if down is not None else
                      slot.why if slot is not None and slot.why else
                      newer.why if newer is not None and newer.why else
                      self._refused[user].why if user in self._refused else None),
            "lastLatencyMs": self._latency.get(user),
            "batching": local.scheduler.stats() if local is not None and local.batching else None,
            "work": local.work_stats() if local is not None else None,
            "prepared": local.prepared if local is not None else None,
            "modelsLoaded": sum(1 for s in self._slots.values() if s.engine is not None),
            "maxModels": self.max_models,
        }

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class HostView:
    """One connection's handle on the shared ModelHost: the same calls, for its own model."""

    def __init__(self, host: ModelHost, user: int) -> None:
        self.host, self.user = host, user

    @property
    def engine(self) -> Engine | None:
        return self.host.engine_of(self.user)

    @property
    def loading(self) -> bool:
        return self.host.is_loading(self.user)

    def needs_load(self, model: str, device: str) -> bool:
        return self.host.needs_load(model, device, self.user)

    def start_load(self, model: str, device: str) -> asyncio.Future:
        return self.host.start_load(model, device, self.user)

    async def load(self, model: str, device: str) -> Engine:
        return await self.host.load(model, device, self.user)

    async def ready_engine(self) -> Engine:
        return await self.host.ready_engine(self.user)

    async def infill(self, *args, **kwargs) -> InfillResult:
        return await self.host.infill(*args, **kwargs, user=self.user)

    async def run_plan(self, plan: CompletionPlan, cancel: CancelToken,
                       on_step: Callable[[StepState], None] | None = None,
                       engine: Engine | None = None) -> InfillResult:
        return await self.host.run_plan(plan, cancel, on_step, user=self.user, engine=engine)

    def status(self) -> dict:
        return self.host.status(self.user)

    def release(self) -> None:
        """The connection closed (ModelHost.disconnect)."""
        self.host.disconnect(self.user)

    def shutdown(self) -> None:
        self.host.shutdown()

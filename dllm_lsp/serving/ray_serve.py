"""Serving the denoiser beyond one machine with Ray Serve (`pip install "dllm-lsp[ray]"`).

Ray Serve does the distribution: `DenoiserReplica` is a deployment whose replicas each load
the model once and run infill requests (cancellable at a step boundary, streamed step by
step); Serve places the replicas on the cluster's GPUs or CPUs, routes each request to one,
autoscales on the number of ongoing requests, health-checks them and replaces the ones that
die. No cluster code of ours.

The LSP front (documents, trees, planning, post-processing, streaming, multi-site edits) stays
in `dllm-lsp serve`; started with `--ray ADDRESS` it sends each infill request (the request, not
a token canvas: the replica tokenizes, so the front needs no weights) to the deployment through
`RemoteEngine`, which behaves like the local `Engine`: same `infill` call, step states for
`$/progress`, `$/cancelRequest` and supersede cancel the Serve request (the replica stops its
denoise at the next step), and a request whose replica died is sent again to another one. It
watches its cluster between requests (`RemoteEngine.unavailable`): a cluster that has gone is
said so, and one made again at the address (another model, maybe) is joined without a restart.

    dllm-lsp ray deploy --address HOST:PORT --model M [--device cuda] [--replicas N | --autoscale MIN:MAX]
    dllm-lsp serve --stdio --ray HOST:PORT
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import ray
from ray import serve
from ray._raylet import GcsClient
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError
from ray.serve.exceptions import RayServeException
from ray.serve import context as serve_context
from tokenizers import Tokenizer

from dllm_lsp.cli_errors import one_line
from dllm_lsp.engine.denoiser import SpecialTokens, plain_text_tokenizer
from dllm_lsp.engine.engine import Cancelled, CancelToken, Engine
from dllm_lsp.engine.types import CacheSettings, DecodeSettings, InfillRequest, InfillResult, StepState
from dllm_lsp.loader import ModelLoadError, load_model, resolve_model_path

log = logging.getLogger(__name__)

APP_NAME = "dllm-lsp"
DEPLOYMENT = "DenoiserReplica"
RETRIES = 3              # a request whose replica died is sent again this many times
CANCEL_POLL_S = 0.02     # how often a waiting front checks its cancel token
GCS_CHECK_S = 5.0        # how often a request waiting for its answer checks that the cluster is there
HEALTH_S = 5.0           # how often a front checks its cluster between requests (RemoteEngine.unavailable)
# Ray ends a driver process that has lost the cluster's GCS for this long (60 s by default): the
# front is a driver, and with it went every editor's connection. A year: the front stays, its
# requests fail with RemoteUnavailable, and it serves again once the cluster is back.
GCS_RECONNECT_TIMEOUT_S = str(365 * 24 * 3600)


class RemoteUnavailable(ModelLoadError):
    """The Ray cluster or the deployment cannot be reached, or no replica could serve."""


class ClusterChanged(Exception):
    """The cluster at the address is another one than this driver's session joined (its head was
    restarted): what was sent to the old one will never be answered."""


class ModelChanged(Exception):
    """A replica's refusal of a request made for another model than the one it serves (the
    deployment was redeployed with another model, and the front had not noticed yet): its budgets
    and limits were the other model's tokenizer's. Carries the replica's description (`info`,
    tokenizer included), so that the front takes it up without asking again."""

    def __init__(self, info: dict) -> None:
        super().__init__(info)      # the one argument: how Ray's pickling makes it again
        self.info = info

    def __str__(self) -> str:
        return f"this replica serves {self.info['name']} on {self.info['device']}"


def model_key(info: dict) -> str:
    """What tells two models apart for the front: everything it plans a request with (name,
    limits, special tokens, the tokenizer itself) and the device it names in dllm/status."""
    kept = {k: v for k, v in info.items() if k not in ("key", "started", "replica", "pid")}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ReplicaConfig:
    """How a deployment is laid out on the cluster (`dllm-lsp ray deploy`)."""

    model: str = "default"
    device: str = "auto"
    replicas: int = 1
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    autoscale: tuple[int, int] | None = None       # (min, max) replicas, scaled on ongoing requests
    target_ongoing_requests: float = 2.0
    max_ongoing_requests: int = 8
    # No context budget here: every request carries its client's (`contextTokens`), so a
    # replica-wide one never applied (a `--context-tokens` flag did nothing for editors).


BOARD_NAMESPACE = "dllm_lsp"


def board_name(app_name: str) -> str:
    return f"{app_name}-counters"


@ray.remote(num_cpus=0)
class CounterBoard:
    """Every replica's request counters and the model they serve, where `ray status` reads them,
    and the newest replica's full description, where fronts notice a redeploy with another model.

    Asking the replicas themselves went through Serve's routing: the question waited in the same
    queue as the infill requests (behind all of them when the replicas were busy, which is when
    one asks), and reached replicas at random, so 40 tries could miss one of many. Replicas report
    here after every change (a message they do not wait for); a replica that died keeps its last
    row, and `status` says which ones are alive. One detached actor per application, no CPU."""

    def __init__(self) -> None:
        self.rows: dict[str, dict] = {}
        self.model: dict | None = None
        self.info: dict | None = None

    def report(self, row: dict, model: dict | None = None, info: dict | None = None) -> None:
        self.rows[row["replica"]] = row
        # The newest replica's model is the deployment's: in a rolling redeploy the new replicas
        # start while the old ones still serve (and report their counters).
        if info is not None and (self.info is None or info["started"] >= self.info["started"]):
            self.info = info
            self.model = model if model is not None else self.model
        elif model is not None and info is None:
            self.model = model

    def snapshot(self) -> dict:
        return {"model": self.model, "replicas": dict(self.rows)}

    def current(self, key: str | None = None) -> dict | None:
        """The newest replica's description (None: no replica has started); only its key when
        that is `key` (what the asking front holds: nothing to send every few seconds)."""
        if self.info is None or self.info["key"] != key:
            return self.info
        return {"key": key}


def counter_board(app_name: str):
    """The application's board, made by the first replica that asks."""
    return CounterBoard.options(name=board_name(app_name), namespace=BOARD_NAMESPACE, lifetime="detached",
                                get_if_exists=True).remote()


class DenoiserReplica:
    """One replica: one engine on this replica's device, requests one at a time (the engine's lock)."""

    def __init__(self, model: str, device: str) -> None:
        self.engine = Engine(load_model(model, device))
        self.engine.prepare()     # a replica takes traffic warm (Engine.prepare)
        # "stopped": cancelled requests whose denoise loop has ended (at its next step boundary),
        # as opposed to "cancelled", counted when the cancel arrives.
        self.counts = {"requests": 0, "completed": 0, "cancelled": 0, "stopped": 0, "failed": 0}
        context = serve.get_replica_context()
        self.replica_id = context.replica_id.unique_id
        self.started = time.time()      # which replica is newest (the board keeps its model)
        denoiser = self.engine.denoiser
        self.key = model_key(self._info())
        self.board = counter_board(context.app_name)
        self.board.report.remote(self.stats(), {**denoiser.describe(), "device": f"ray:{denoiser.device}",
                                                "backend": "ray"}, self.info())

    def _count(self, what: str) -> None:
        self.counts[what] += 1
        self.board.report.remote(self.stats())

    def _info(self) -> dict:
        denoiser = self.engine.denoiser
        return {**denoiser.describe(), "max_context": denoiser.max_context, "max_slot": denoiser.max_slot,
                "special": denoiser.special, "tokenizer": denoiser.tokenizer.to_str()}

    def info(self) -> dict:
        return {**self._info(), "key": self.key, "started": self.started, "replica": self.replica_id}

    def stats(self) -> dict:
        # The pid: which process to look at (or kill) on the replica's node.
        return {"replica": self.replica_id, "pid": os.getpid(), **self.counts}

    def _same_model(self, model: str | None) -> None:
        """Refuse a request made for another model (`model`: its key; None: a caller that does not say)."""
        if model is not None and model != self.key:
            raise ModelChanged(self.info())

    def check_health(self) -> None:
        """Serve calls this every health_check_period_s; raising takes the replica out of rotation."""
        if self.engine is None:
            raise RuntimeError("engine not loaded")

    async def infill(self, request: InfillRequest, settings: DecodeSettings, context_tokens: int | None,
                     cache: CacheSettings, model: str | None = None) -> InfillResult:
        self._same_model(model)
        self._count("requests")
        cancel = CancelToken()
        job = asyncio.to_thread(self.engine.infill, request, settings, cancel, None,
                                context_tokens=context_tokens, cache=cache)
        return await self._finish(asyncio.ensure_future(job), cancel)

    async def infill_stream(self, request: InfillRequest, settings: DecodeSettings, context_tokens: int | None,
                            cache: CacheSettings, model: str | None = None):
        """Yields ("step", StepState) after every denoising step, then ("result", InfillResult)."""
        self._same_model(model)
        self._count("requests")
        cancel = CancelToken()
        loop = asyncio.get_running_loop()
        states: asyncio.Queue = asyncio.Queue()

        def on_step(state: StepState) -> None:
            loop.call_soon_threadsafe(states.put_nowait, state)

        task = asyncio.ensure_future(asyncio.to_thread(self.engine.infill, request, settings, cancel, on_step,
                                                       context_tokens=context_tokens, cache=cache))
        try:
            while not task.done() or not states.empty():
                getter = asyncio.ensure_future(states.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield ("step", getter.result())
                else:
                    getter.cancel()
            yield ("result", await self._finish(task, cancel))
        except asyncio.CancelledError:
            self._stop(task, cancel)
            raise

    def _stop(self, task: asyncio.Future, cancel: CancelToken) -> None:
        """The caller cancelled (the editor moved on, or its front): stop the loop at its next step
        boundary. Counted as "cancelled" now (once: a stream's cancel passes through `_finish` too)
        and "stopped" when the loop has ended, which is when the replica's work is over."""
        if cancel.cancelled:
            return
        cancel.cancel()
        self._count("cancelled")

        def ended(done: asyncio.Future) -> None:
            if not done.cancelled():
                done.exception()    # Cancelled, as asked: retrieved, so asyncio does not log it
            self._count("stopped")
        task.add_done_callback(ended)

    async def _finish(self, task: asyncio.Future, cancel: CancelToken) -> InfillResult:
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            self._stop(task, cancel)
            raise
        except Exception:
            self._count("failed")
            raise
        self._count("completed")
        return result


def deployment_for(config: ReplicaConfig):
    options = {
        "name": DEPLOYMENT,
        "ray_actor_options": {"num_cpus": config.num_cpus, "num_gpus": config.num_gpus},
        "max_ongoing_requests": config.max_ongoing_requests,
        "health_check_period_s": 10.0,
        "health_check_timeout_s": 30.0,
    }
    if config.autoscale is not None:
        low, high = config.autoscale
        options["autoscaling_config"] = {"min_replicas": low, "max_replicas": high, "initial_replicas": low,
                                         "target_ongoing_requests": config.target_ongoing_requests}
    else:
        options["num_replicas"] = config.replicas
    return serve.deployment(**options)(DenoiserReplica).bind(config.model, config.device)


# The cluster this process's driver session belongs to: its GCS address and its cluster id. Ray's
# session is one per process, so this is too.
_joined: dict[str, str] = {}


def cluster_id(gcs_address: str) -> str:
    """The id of the cluster whose GCS answers at `gcs_address` (a head started again at the same
    address is a new cluster, with a new id). Asked through a GCS client of its own, a millisecond:
    the driver's session must never ask a cluster other than its own (Ray aborts the process,
    "WrongClusterID ... Check failed")."""
    return GcsClient(address=gcs_address).cluster_id.hex()


def session_state() -> tuple[str, str]:
    """("same", ""): this driver's cluster still answers at its address; ("gone", reason): nothing
    answers there; ("new", ""): another cluster does, or the driver has no session (it must join
    again). A TCP connect first: a GCS client to an address where nothing listens waits 40 s."""
    if not ray.is_initialized() or not _joined:
        return "new", ""
    host, _, port = _joined["gcs"].rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=2).close()
    except OSError as exc:
        return "gone", str(exc)
    try:
        now = cluster_id(_joined["gcs"])
    except Exception as exc:  # noqa: BLE001 - a GCS that listens but does not answer yet (starting up)
        return "gone", one_line(exc) or type(exc).__name__
    return ("same", "") if now == _joined["cluster"] else ("new", "")


def rejoin(address: str) -> None:
    """Leave this driver's session (its cluster gone or replaced) and join the cluster at `address` now."""
    ray.shutdown()
    _joined.clear()
    # Serve keeps its controller client across ray.shutdown and trusts it while the job id
    # matches; a new cluster hands this driver the same job id as the old one did (both count
    # from 1), so Serve went on asking the old cluster's controller ("Can't find actor ... from a
    # different cluster"). Dropping the cached client (Serve on the cluster is untouched) makes it
    # find the new cluster's controller by name.
    serve_context._disconnect()
    connect(address)


def connect(address: str) -> None:
    """Join the Ray cluster at `address` (HOST:PORT of its GCS, or "auto") as a driver."""
    if ray.is_initialized():
        if not _joined:     # a session another part of this process opened
            gcs = ray.get_runtime_context().gcs_address
            _joined.update(gcs=gcs, cluster=cluster_id(gcs))
        return
    host, _, port = address.rpartition(":")
    if address != "auto" and port.isdecimal():
        # ray.init retries an unreachable address for minutes: find out first, with a short timeout.
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
        except OSError as exc:
            raise RemoteUnavailable(f"cannot reach the Ray cluster at {address}: {exc}") from exc
    os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", GCS_RECONNECT_TIMEOUT_S)
    logging.getLogger("ray.serve").setLevel(logging.WARNING)   # its INFO lines on our CLI's stderr
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                 configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError, ray.exceptions.RayError) as exc:
        # The port answered (checked above), so a refusal here is most often Ray's token
        # authentication (on by default in recent Ray): ray.init only reports "failed to connect".
        raise RemoteUnavailable(
            f"cannot join the Ray cluster at {address}: {one_line(exc) or type(exc).__name__} (a cluster with "
            "Ray token authentication refuses a process without its token: set RAY_AUTH_MODE=token and "
            "RAY_AUTH_TOKEN_PATH=FILE, or put the token in ~/.ray/auth_token)") from exc
    gcs = ray.get_runtime_context().gcs_address      # "auto" resolved
    _joined.update(gcs=gcs, cluster=cluster_id(gcs))


def deploy(address: str, config: ReplicaConfig, app_name: str = APP_NAME) -> dict:
    """Start (or update) the deployment and wait until it serves; returns its model's description.
    What would never serve is refused first, in one line: a model folder this node does not have
    (every node needs it at the same path), replicas no node has the CPUs or GPUs for (Serve waits
    for them for ever, silently)."""
    try:
        resolve_model_path(config.model, None if config.device == "auto" else config.device.split(":")[0])
    except ModelLoadError as exc:
        raise RemoteUnavailable(f"{exc} (the folder must exist at that path on every node)") from None
    connect(address)
    nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    if not any(r.get("CPU", 0) >= config.num_cpus and r.get("GPU", 0) >= config.num_gpus for r in nodes):
        have = ", ".join(f"{r.get('CPU', 0):g} CPU / {r.get('GPU', 0):g} GPU" for r in nodes) or "no live node"
        raise RemoteUnavailable(f"no node of the cluster at {address} has the {config.num_cpus:g} CPU(s) and "
                                f"{config.num_gpus:g} GPU(s) a replica asks for ({have}): lower --num-cpus / "
                                "--num-gpus, or use --device cpu where Ray sees no GPU")
    try:
        handle = serve.run(deployment_for(config), name=app_name, route_prefix=None)
    except RuntimeError as exc:   # Serve's "Deploying application ... failed", the reason left in its status
        raise RemoteUnavailable(f"deploying {app_name!r} failed: {_deployment_message(app_name) or one_line(exc)}") from None
    info = handle.info.remote().result(timeout_s=600)
    return {k: v for k, v in info.items() if k not in ("tokenizer", "special")}


def _deployment_message(app_name: str) -> str:
    """The last line of what Serve says about the application's deployment (a replica's error)."""
    try:
        app = serve.status().applications.get(app_name)
    except Exception:   # noqa: BLE001 - only a better message is at stake
        return ""
    if app is None:
        return ""
    messages = [d.message for d in app.deployments.values() if d.message] or [app.message]
    lines = [line.strip() for line in "\n".join(m for m in messages if m).splitlines() if line.strip()]
    return lines[-1] if lines else ""


def undeploy(address: str, app_name: str = APP_NAME) -> None:
    connect(address)
    try:
        serve.delete(app_name)
    except (RayServeException, ValueError) as exc:
        raise RemoteUnavailable(f"nothing to delete: {one_line(exc)}") from None
    try:   # its counters go with it: a new deployment's status lists only its own replicas
        ray.kill(ray.get_actor(board_name(app_name), namespace=BOARD_NAMESPACE))
    except ValueError:
        pass


def _deploy_hint(address: str, app_name: str) -> str:
    return f"start one with `dllm-lsp ray deploy --address {address}" + (
        f" --app {app_name}`" if app_name != APP_NAME else "`")


def _app_status(address: str, app_name: str):
    """Serve's status of the application (None: not deployed); RemoteUnavailable when no Serve
    runs on the cluster or the application failed to deploy."""
    connect(address)
    try:
        status = serve.status().applications.get(app_name)
    except (RayServeException, ValueError) as exc:
        raise RemoteUnavailable(f"no Serve instance runs on the Ray cluster at {address} "
                                f"({_deploy_hint(address, app_name)}): {one_line(exc)}") from None
    if status is not None and status.status == "DEPLOY_FAILED":
        # Its handle would wait the whole timeout and say "Timed out resolving to ObjectRef".
        # (UNHEALTHY is not refused: a replica being replaced, the others still serve.)
        raise RemoteUnavailable(f"the {app_name!r} deployment on the Ray cluster at {address} is "
                                f"DEPLOY_FAILED: {_deployment_message(app_name) or status.message}")
    return status


def replica_status(address: str, app_name: str = APP_NAME, timeout_s: float = 30.0) -> dict:
    """`ray status`: the deployment's model and every replica's counters, each marked `alive`
    (its actor still runs), read from the application's CounterBoard: answered at once however
    busy the replicas are."""
    status = _app_status(address, app_name)
    if status is None:
        raise RemoteUnavailable(f"no {app_name!r} deployment serves on the Ray cluster at {address} "
                                f"({_deploy_hint(address, app_name)})")
    try:
        board = ray.get_actor(board_name(app_name), namespace=BOARD_NAMESPACE)
        seen = ray.get(board.snapshot.remote(), timeout=timeout_s)
    except ValueError:      # no replica has started yet
        seen = {"model": None, "replicas": {}}
    # Serve names a replica's actor SERVE_REPLICA::APP#DEPLOYMENT#ID; a dead one's name is gone.
    running = {actor["name"].rsplit("#", 1)[-1] for actor in ray.util.list_named_actors(all_namespaces=True)
               if f"{app_name}#{DEPLOYMENT}#" in actor["name"]}
    replicas = {rid: {**row, "alive": rid in running} for rid, row in seen["replicas"].items()}
    return {"model": seen["model"], "status": status.status, "replicas": replicas}


def replica_error(exc: RayTaskError) -> Exception:
    """What a replica raised (a request its model cannot take), as a local engine raises it: its
    own one-line error, not Ray's remote traceback with its colour codes (editors showed all 36
    lines of it)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, Exception) else RemoteUnavailable(one_line(exc))


class RemoteDenoiser:
    """What the front needs of a model it does not hold: its name, tokenizer (for budgets) and limits."""

    decoding = "remote"

    def __init__(self, info: dict) -> None:
        self.name = info["name"]
        self.family = info["family"]
        self.device = f"ray:{info['device']}"
        self.max_context = int(info["max_context"])
        self.max_slot: int | None = info.get("max_slot")   # the widest slot it was trained on (Denoiser.max_slot)
        self.special: SpecialTokens = info["special"]
        self.tokenizer = plain_text_tokenizer(Tokenizer.from_str(info["tokenizer"]))
        # Which model exactly (model_key), sent with every request so that a replica of another
        # one refuses it, and when the replica that described it started (the newest one wins).
        self.key: str | None = info.get("key")
        self.started: float = float(info.get("started", 0.0))

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids if text else []

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False) if ids else ""

    def describe(self) -> dict:
        return {"name": self.name, "family": self.family, "device": self.device, "backend": "ray"}


class RemoteEngine:
    """The front's engine when the model lives in a Ray Serve deployment: `infill` as Engine's.

    It watches its cluster (`check`, every HEALTH_S on a thread of its own, and before a request
    while something is wrong): `unavailable` says why the deployment cannot serve now (None: it
    can), for `dllm/status`; a cluster made again at the address is joined afresh and the
    deployment's model read again, so a front that saw no request while its cluster was down
    serves again at once, and names the model the new deployment serves."""

    def __init__(self, address: str, app_name: str = APP_NAME, timeout_s: float = 120.0,
                 health_s: float = HEALTH_S) -> None:
        self.address, self.app_name, self.timeout_s = address, app_name, timeout_s
        self._lock = threading.RLock()      # one check (and one rejoin) at a time, the watcher's or a request's
        connect(address)
        if session_state()[0] == "new":
            # A session left by an earlier try (a front retrying a deployment that was not up) on
            # a cluster that has been started again since: asking it anything aborts the process.
            rejoin(address)
        self._attach()
        self.context_tokens = None
        # Why the deployment cannot serve now (None: it can); `_attached` is False while the handle
        # and the model's description must be taken again (the cluster or the deployment went).
        self.unavailable: str | None = None
        self._attached = True
        self._closed = threading.Event()
        threading.Thread(target=self._watch, args=(health_s,), daemon=True, name="dllm-ray-health").start()

    def _attach(self) -> None:
        """Take the deployment's handle and its model's description (RemoteUnavailable: no
        deployment serves). A deployment made again may serve another model: the front then
        budgets with its tokenizer and limits, and dllm/status names it."""
        hint = _deploy_hint(self.address, self.app_name)
        status = _app_status(self.address, self.app_name)
        if status is None:
            raise RemoteUnavailable(f"no {self.app_name!r} deployment serves on the Ray cluster at "
                                    f"{self.address} ({hint})")
        try:
            handle = serve.get_deployment_handle(DEPLOYMENT, app_name=self.app_name)
            info = handle.info.remote().result(timeout_s=self.timeout_s)
        except (RayServeException, KeyError, ValueError, TimeoutError) as exc:
            raise RemoteUnavailable(f"no {self.app_name!r} deployment serves on the Ray cluster at "
                                    f"{self.address} ({hint}): {one_line(exc)}") from exc
        denoiser = RemoteDenoiser(info)
        old = getattr(self, "denoiser", None)
        if old is not None and old.describe() != denoiser.describe():
            log.warning("the %r deployment now serves %s on %s (it served %s on %s)", self.app_name,
                        denoiser.name, denoiser.device, old.name, old.device)
        self.handle, self.denoiser = handle, denoiser
        try:
            # The application's board (its newest replica's model: `check` compares keys with it).
            # Taken once: a call to the actor goes to its worker, not through the GCS.
            self._board = ray.get_actor(board_name(self.app_name), namespace=BOARD_NAMESPACE)
        except ValueError:      # replicas of a version that made none
            self._board = None

    def _adopt(self, info: dict) -> bool:
        """Take up the model a replica described if it is the newest one seen (a redeploy), and
        say whether the front now holds that model (False: an older replica, being replaced)."""
        with self._lock:
            old = self.denoiser
            if info.get("key") == old.key:
                return True
            if float(info.get("started", 0.0)) < old.started:
                return False
            self.denoiser = RemoteDenoiser(info)
            log.warning("the %r deployment now serves %s on %s (it served %s on %s)", self.app_name,
                        self.denoiser.name, self.denoiser.device, old.name, old.device)
            return True

    def _same_deployment(self) -> None:
        """Follow a redeploy with another model on the same cluster: the board's newest replica
        serves another model than the front holds (the front budgeted with the old model's
        tokenizer, and dllm/status named it, until the deployment went away). RemoteUnavailable
        when the board went: the deployment was deleted (`ray delete` ends its board)."""
        if self._board is None:
            return
        try:
            now = ray.get(self._board.current.remote(self.denoiser.key), timeout=GCS_CHECK_S)
        except ray.exceptions.GetTimeoutError:
            return              # a busy head: asked again at the next check
        except RayActorError:
            self._attached = False
            self._attach()      # deleted (RemoteUnavailable), or deleted and made again: taken anew
            self._attached = True
            return
        if now is not None and "tokenizer" in now:
            self._adopt(now)

    def check(self) -> str | None:
        """Why the deployment cannot serve now (None: it can), mending what can be mended: a
        cluster started again at the address is joined, a deployment made again is attached.
        While all is well this is a TCP connect and the cluster's id read from its GCS."""
        with self._lock:
            state, reason = session_state()
            if state == "gone":
                self.unavailable = f"the Ray cluster at {self.address} is gone ({reason})"
                self._attached = False
                return self.unavailable
            try:
                if state == "new":
                    log.warning("joining the Ray cluster at %s again (it was started again)", self.address)
                    self._attached = False
                    rejoin(self.address)
                if not self._attached:
                    self._attach()
                    self._attached = True
                    if self.unavailable is not None:
                        log.warning("the %r deployment serves again (%s)", self.app_name, self.denoiser.name)
                else:
                    self._same_deployment()
                self.unavailable = None
            except RemoteUnavailable as exc:
                self.unavailable = str(exc)
            return self.unavailable

    def _watch(self, period: float) -> None:
        """Check the cluster every `period` seconds, requests or not: a front that got no request
        while its cluster went and came back said `loaded` throughout, and its first request
        afterwards waited the whole timeout on the old cluster's session."""
        while not self._closed.wait(period):
            try:
                self.check()
            except Exception:   # noqa: BLE001 - the watcher must outlive a surprise, or the status freezes
                log.exception("checking the Ray cluster at %s failed", self.address)

    def close(self) -> None:
        """Stop watching the cluster (ModelHost calls this when it lets the engine go)."""
        self._closed.set()

    def _ready(self) -> None:
        """RemoteUnavailable at once while the deployment cannot serve (checked again now, so the
        first request after the cluster is back is served)."""
        if self.unavailable is not None or not self._attached:
            why = self.check()
            if why is not None:
                raise RemoteUnavailable(why)

    def infill(self, request: InfillRequest, settings: DecodeSettings = DecodeSettings(),
               cancel: CancelToken | None = None, on_step: Callable[[StepState], None] | None = None, *,
               context_tokens: int | None = None, cache: CacheSettings = CacheSettings()) -> InfillResult:
        """Blocking, like Engine.infill: raises Cancelled when `cancel` fires, RemoteUnavailable when
        no replica could serve after RETRIES tries."""
        cancel = cancel or CancelToken()
        self._ready()
        made_for = self.denoiser       # the model the caller planned this request with
        args = (request, settings, context_tokens, cache, made_for.key)
        last: Exception | None = None
        for attempt in range(1, RETRIES + 1):
            if cancel.cancelled:
                raise Cancelled()
            try:
                if on_step is None:
                    return self._call(args, cancel)
                return self._stream(args, cancel, on_step)
            except (ActorDiedError, ActorUnavailableError, RayActorError) as exc:
                # The replica died under the request: Serve routes the retry to a live one.
                last = exc
                log.warning("replica lost during a request (try %d of %d): %s", attempt, RETRIES,
                            str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                time.sleep(0.2 * attempt)
            except ClusterChanged as exc:
                # Sent to a cluster that was replaced while it waited: sent again to the new one.
                last = exc
                self._ready()
            except RayServeException as exc:
                with self._lock:
                    self._attached = False      # the deployment went (deleted): taken again when it is back
                    self.unavailable = f"the {self.app_name!r} deployment cannot serve: {one_line(exc)}"
                raise RemoteUnavailable(self.unavailable) from exc
            except RayTaskError as exc:
                error = replica_error(exc)
                if not isinstance(error, ModelChanged):
                    raise error from None
                last = error
                if self._adopt(error.info):
                    # Planned with the other model's tokenizer and limits: not sent to this one.
                    raise RemoteUnavailable(
                        f"the {self.app_name!r} deployment now serves {self.denoiser.name} on "
                        f"{self.denoiser.device} (this request was made for {made_for.name}): ask again") from None
                # An older replica that a redeploy is replacing: sent again, to a newer one.
        raise RemoteUnavailable(f"no replica of {self.app_name!r} could serve the request after {RETRIES} tries: {last}")

    def _call(self, args: tuple, cancel: CancelToken) -> InfillResult:
        response = self.handle.infill.remote(*args)
        deadline = time.monotonic() + self.timeout_s
        next_check = time.monotonic() + GCS_CHECK_S
        while True:
            if cancel.cancelled:
                response.cancel()
                raise Cancelled()
            try:
                return response.result(timeout_s=CANCEL_POLL_S)
            except TimeoutError:
                if time.monotonic() > deadline:
                    response.cancel()
                    raise RemoteUnavailable(f"no answer from {self.app_name!r} within {self.timeout_s:.0f} s") from None
                if time.monotonic() > next_check:
                    next_check = time.monotonic() + GCS_CHECK_S
                    self._check_cluster(response)

    def _check_cluster(self, response) -> None:
        """RemoteUnavailable at once when the cluster's GCS no longer answers (the cluster stopped,
        its head died), ClusterChanged when another cluster answers at the address: the request
        would otherwise wait its whole timeout."""
        state, reason = session_state()
        if state == "same":
            return
        response.cancel()       # ends a stream's wait (a cancel is local to this driver's router)
        if state == "new":
            raise ClusterChanged(f"the Ray cluster at {self.address} was started again")
        with self._lock:
            self._attached = False
            self.unavailable = f"the Ray cluster at {self.address} is gone ({reason})"
        raise RemoteUnavailable(self.unavailable)

    def _stream(self, args: tuple, cancel: CancelToken, on_step: Callable[[StepState], None]) -> InfillResult:
        stream = self.handle.options(stream=True).infill_stream.remote(*args)
        stop = threading.Event()

        gone: list[Exception] = []

        def watch() -> None:
            # Iterating blocks between steps: a watcher turns a cancel into the Serve cancel, and a
            # cluster that has gone into an error instead of a wait without end.
            next_check = time.monotonic() + GCS_CHECK_S
            while not stop.wait(CANCEL_POLL_S):
                if cancel.cancelled:
                    stream.cancel()
                    return
                if time.monotonic() > next_check:
                    next_check = time.monotonic() + GCS_CHECK_S
                    try:
                        self._check_cluster(stream)
                    except (ClusterChanged, RemoteUnavailable) as exc:
                        gone.append(exc)
                        return

        watcher = threading.Thread(target=watch, daemon=True, name="dllm-ray-cancel")
        watcher.start()
        try:
            for kind, payload in self._items(stream, cancel):
                if kind == "step":
                    on_step(payload)
                else:
                    return payload
        except Cancelled:
            if gone:
                raise gone[0] from None
            raise
        finally:
            stop.set()
        if gone:
            raise gone[0]
        raise RemoteUnavailable("the replica's stream ended without a result")

    def _items(self, stream, cancel: CancelToken) -> Iterator[tuple[str, object]]:
        try:
            yield from stream
        except (asyncio.CancelledError, ray.exceptions.TaskCancelledError):
            raise Cancelled() from None
        except RayServeException:
            if cancel.cancelled:
                raise Cancelled() from None
            raise
        if cancel.cancelled:
            raise Cancelled()

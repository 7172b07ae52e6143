"""Owns the loaded model: loads it off the event loop, runs every denoise on one worker
thread (the GPU serves one request at a time), and remembers why a load failed."""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dllm_lsp.engine.batching import DEFAULT_MAX_BATCH
from dllm_lsp.engine.engine import CancelToken, Engine
from dllm_lsp.engine.types import CacheSettings, DecodeSettings, InfillRequest, InfillResult, StepState
from dllm_lsp.pipeline import CompletionPlan
from dllm_lsp.loader import ModelLoadError, load_model

log = logging.getLogger(__name__)


LOAD_WAIT_S = 300.0   # how long a request waits for a load in progress (a 7B checkpoint from disk)


class ModelUnavailable(Exception):
    """No model is loaded: it failed to load (the message says why) or none was asked for."""


@dataclass
class LoadKey:
    model: str
    device: str


def local_engine(model: str, device: str, batching: bool = True, prefix_cache: int | None = None) -> Engine:
    """`prefix_cache`: context caches the embedded model keeps (None: its default; 0: none)."""
    engine = Engine(load_model(model, device), batching=batching)
    if prefix_cache is not None and hasattr(engine.denoiser, "prefix_cache_entries"):
        engine.denoiser.prefix_cache_entries = prefix_cache
    return engine


class ModelHost:
    """`connect(model, device)` makes the engine (default: load the model here). `workers` is how
    many infills may be in flight at once: the engine's step scheduler lets concurrent requests
    share denoising steps (engine/batching.py), and a remote engine (a Ray Serve deployment,
    dllm_lsp/serving) spreads them over its replicas."""

    def __init__(self, connect: Callable[[str, str], Engine] = local_engine,
                 workers: int = DEFAULT_MAX_BATCH) -> None:
        self._connect = connect
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dllm-model")
        self._engine: Engine | None = None
        self._key: LoadKey | None = None
        self._loading: asyncio.Future | None = None
        self.error: str | None = None
        self.last_latency_ms: float | None = None
        self.load_wait_s = LOAD_WAIT_S

    @property
    def engine(self) -> Engine | None:
        return self._engine

    @property
    def loading(self) -> bool:
        """A load is under way."""
        return self._loading is not None and not self._loading.done()

    def needs_load(self, model: str, device: str) -> bool:
        return self._key != LoadKey(model, device)

    def start_load(self, model: str, device: str) -> asyncio.Future:
        """Start loading `model` on `device` now (synchronously: a request arriving right after
        sees the load in progress and waits for it). Callers asking for the model being loaded,
        or already loaded, share that load (TCP connections arriving together load it once)."""
        key = LoadKey(model, device)
        if key != self._key or self._loading is None or (self._loading.done() and self._engine is None):
            self._key = key
            self._loading = asyncio.ensure_future(self._load(model, device))
        return self._loading

    async def load(self, model: str, device: str) -> Engine:
        """Load `model` on `device` (replacing the current one). Raises ModelLoadError."""
        return await asyncio.shield(self.start_load(model, device))

    async def _load(self, model: str, device: str) -> Engine:
        loop = asyncio.get_running_loop()
        try:
            engine = await loop.run_in_executor(self._executor, self._load_blocking, model, device)
        except ModelLoadError as exc:
            self._engine, self.error = None, str(exc)
            raise
        except Exception as exc:  # anything unexpected still leaves the server running
            self._engine, self.error = None, f"{type(exc).__name__}: {exc}"
            raise ModelLoadError(self.error) from exc
        self._engine, self.error = engine, None
        return engine

    def _load_blocking(self, model: str, device: str) -> Engine:
        start = time.perf_counter()
        engine = self._connect(model, device)
        log.info("loaded %s on %s in %.2fs", engine.denoiser.name, engine.denoiser.device, time.perf_counter() - start)
        return engine

    async def ready_engine(self) -> Engine:
        """The engine, waiting for a load in progress (up to `load_wait_s`); ModelUnavailable when
        there is none, the load failed, or it takes longer than that."""
        if self._loading is not None and not self._loading.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._loading), timeout=self.load_wait_s)
            except asyncio.TimeoutError:
                raise ModelUnavailable(f"the model is still loading after {self.load_wait_s:.0f} s; "
                                       "try again when dllm/status says loaded") from None
            except Exception:
                pass
        if self._engine is None:
            raise ModelUnavailable(f"no model loaded: {self.error or 'the model has not been loaded yet'}")
        return self._engine

    async def infill(
        self,
        request: InfillRequest,
        settings: DecodeSettings,
        cancel: CancelToken,
        on_step: Callable[[StepState], None] | None = None,
        *,
        context_tokens: int | None = None,
        cache: CacheSettings = CacheSettings(),
    ) -> InfillResult:
        """Run one infill on the worker thread with this request's own options (the engine is
        shared by every connection and never reconfigured). If the awaiting task is cancelled,
        the loop is told to stop at its next step boundary before the cancellation propagates."""
        engine = await self.ready_engine()
        run = functools.partial(engine.infill, request, settings, cancel, on_step,
                                context_tokens=context_tokens, cache=cache)
        return await self._run(run, cancel)

    async def run_plan(self, plan: CompletionPlan, cancel: CancelToken,
                       on_step: Callable[[StepState], None] | None = None) -> InfillResult:
        """Run a completion plan (its request, decode settings, budget and cache mode)."""
        engine = await self.ready_engine()
        return await self._run(functools.partial(plan.run, engine, cancel, on_step), cancel)

    async def _run(self, call: Callable[[], InfillResult], cancel: CancelToken) -> InfillResult:
        future = asyncio.get_running_loop().run_in_executor(self._executor, call)
        try:
            result = await future
        except asyncio.CancelledError:
            cancel.cancel()
            raise
        except ModelLoadError as exc:   # a remote engine whose deployment or cluster went away
            raise ModelUnavailable(str(exc)) from None
        self.last_latency_ms = result.latency_ms
        return result

    def status(self) -> dict:
        engine = self._engine
        info = engine.denoiser.describe() if engine else {"name": self._key.model if self._key else None}
        return {
            "model": info.get("name"),
            "family": info.get("family"),
            "device": info.get("device"),
            "loaded": engine is not None,
            "loading": self._loading is not None and not self._loading.done(),
            "error": self.error,
            "lastLatencyMs": self.last_latency_ms,
            "batching": engine.scheduler.stats() if engine is not None and getattr(engine, "batching", False) else None,
        }

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

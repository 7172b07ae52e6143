"""The shared model host holds at most `max_models` models, really: an evicted model's memory comes
back, a connection refused for want of room keeps the model it had and gets the one it asked for
once there is room, a client may change its mind mid-load, and what it reports is its own.
Real loads of tiny models (no stand-in engine)."""
import asyncio
import gc
import threading
import weakref

import pytest
import torch

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.engine.engine import CancelToken
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import resolve_device
from dllm_lsp.server.model_host import LoadKey, ModelHost, ModelUnavailable


@pytest.fixture
def models(tmp_path, tiny_model_dir):
    return str(tiny_model_dir), str(write_tiny_model(tmp_path / "other", seed=1))


async def complete(view) -> None:
    await view.infill(InfillRequest.single("def f(x):\n    return ", "\n", 4), DecodeSettings(steps=2), CancelToken())


async def freed(ref: weakref.ref, seconds: float = 20.0) -> bool:
    for _ in range(int(seconds / 0.1)):
        gc.collect()
        if ref() is None:
            return True
        await asyncio.sleep(0.1)
    return False


def scheduler_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.is_alive() and t.name == "dllm-steps")


async def test_an_evicted_model_is_freed_with_its_thread(models):
    # Each evicted model used to stay behind, held by its step scheduler's thread, while
    # dllm/status said one model was loaded: memory grew by a model a switch.
    first, second = models
    host = ModelHost(max_models=1)
    a = host.view()
    try:
        engine = await a.load(first, "cpu")
        await complete(a)                            # its step scheduler's thread is running
        threads = scheduler_threads()
        denoiser = weakref.ref(engine.denoiser)
        del engine
        for model in (second, first, second):
            await a.load(model, "cpu")
            await complete(a)
        assert await freed(denoiser), "the evicted model is still in memory"
        assert scheduler_threads() <= threads and host.status()["modelsLoaded"] == 1
    finally:
        host.shutdown()


@pytest.fixture
async def refused(models):
    """One room, two connections sharing the first model, the second refused the other one."""
    first, second = models
    host = ModelHost(max_models=1)
    a, b = host.view(), host.view()
    shared = await a.load(first, "cpu")
    assert await b.load(first, "cpu") is shared
    with pytest.raises(ModelUnavailable, match="at most 1 model.*goes on with tiny"):
        b.start_load(second, "cpu")                        # a still uses the only room
    yield shared, a, b
    host.shutdown()


async def test_a_connection_refused_for_want_of_room_keeps_its_model_then_gets_the_one_it_asked_for(refused):
    shared, a, b = refused
    assert await b.ready_engine() is shared                # b completes with what it had ...
    assert b.status()["model"] == "tiny" and "at most 1 model" in b.status()["error"]
    await complete(b)
    a.release()                                            # ... until a leaves
    other = await b.ready_engine()                         # its next request loads what it asked for
    assert other is not shared and other.denoiser.name == "other" and b.status()["error"] is None


async def test_options_that_name_the_model_it_has_end_the_wait_for_another(refused, models):
    shared, a, b = refused
    assert not b.needs_load(models[0], "cpu")              # b's options name its model again
    a.release()
    assert await b.ready_engine() is shared and b.status()["error"] is None


async def test_a_client_that_changes_its_model_mid_load_gets_the_new_one(models):
    # Its own load in progress was taken for another connection's model: the switch was refused
    # and the client left with no model at all.
    first, second = models
    host = ModelHost(max_models=1)
    a = host.view()
    try:
        a.start_load(first, "cpu")                             # not awaited: still loading
        engine = await a.load(second, "cpu")
        assert engine.denoiser.name == "other" and a.status()["error"] is None
        await asyncio.sleep(0.5)
        assert host.status()["modelsLoaded"] == 1
    finally:
        host.shutdown()


async def test_a_model_that_cannot_load_takes_no_ones_room(models, tmp_path):
    first, _ = models
    host = ModelHost(max_models=1)
    a, b, c = host.view(), host.view(), host.view()
    try:
        loaded = await a.load(first, "cpu")
        a.release()                                            # idle: it may be evicted, but not for a typo
        with pytest.raises(Exception, match="does not exist"):
            await b.load(str(tmp_path / "no-such-model"), "cpu")
        assert await c.load(first, "cpu") is loaded            # still loaded, not loaded again
    finally:
        host.shutdown()


async def test_failed_model_names_are_forgotten_once_nobody_asks_for_them(tmp_path):
    """Every name that failed stayed in the host with its error for the server's life: a client
    naming folder after folder grew it without bound, after it had left too."""
    host = ModelHost(max_models=1)
    a = host.view()
    try:
        for i in range(5):
            with pytest.raises(Exception, match="does not exist"):
                await a.load(str(tmp_path / f"no-such-model-{i}"), "cpu")
        assert len(host._slots) == 1                          # only the name it asks for now
        a.release()
        assert not host._slots
    finally:
        host.shutdown()


async def test_the_operators_model_is_never_evicted_for_a_clients(models, tmp_path):
    """Two clients naming other models took the server's own away (max_models 2)."""
    first, second = models
    host = ModelHost(max_models=2)
    host.pin(first, "cpu")
    owner, a, b = host.view(), host.view(), host.view()
    try:
        pinned = await owner.load(first, "cpu")
        owner.release()                                       # idle: evictable, but pinned
        await a.load(second, "cpu")                           # in use: not evictable either
        with pytest.raises(ModelUnavailable) as refused:
            await b.load(str(write_tiny_model(tmp_path / "third", seed=2)), "cpu")   # would need the pinned seat
        assert str(tmp_path) not in str(refused.value)                # names only: no other client's paths
        assert await owner.load(first, "cpu") is pinned
    finally:
        host.shutdown()


async def test_each_connection_reports_its_own_latency(models, tmp_path):
    first, _ = models
    host = ModelHost()
    a, b = host.view(), host.view()
    try:
        await a.load(first, "cpu")
        await complete(a)
        with pytest.raises(Exception):
            await b.load(str(tmp_path / "missing"), "cpu")
        assert a.status()["lastLatencyMs"] > 0 and b.status()["lastLatencyMs"] is None
    finally:
        host.shutdown()


def test_cpu_0_is_the_cpu(models):
    # torch spells it so; safetensors refused it ("device cpu:0 is invalid").
    assert resolve_device("cpu:0") == torch.device("cpu")
    assert LoadKey.of(models[0], "cpu:0") == LoadKey.of(models[0], "cpu")

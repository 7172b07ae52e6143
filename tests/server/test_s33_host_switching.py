"""A connection switching its model back and forth while it types, faster than the loads finish
(a user trying two models from the settings): each switch started another load of the same model
beside the ones still running -- twenty switches, sixteen loads at once in a server of one model.
A load evicted mid-way and asked for again is taken back instead. Real loads of tiny models, held
back until the switching ends so that every switch lands mid-load."""
import asyncio
import threading
import weakref

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.engine.engine import CancelToken
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.server.model_host import ModelHost, local_engine

from .test_model_host import freed


async def test_switching_back_and_forth_mid_load_loads_each_model_once(tmp_path, tiny_model_dir):
    first, second = str(tiny_model_dir), str(write_tiny_model(tmp_path / "other", seed=1))
    disk = threading.Event()
    built: list[tuple[str, weakref.ref]] = []

    def held_back(model: str, device: str):
        disk.wait(60)
        engine = local_engine(model, device)
        built.append((engine.denoiser.name, weakref.ref(engine.denoiser)))
        return engine

    host = ModelHost(connect=held_back, max_models=1)
    a = host.view()
    requests = []
    try:
        for i in range(10):
            model = first if i % 2 == 0 else second
            if a.needs_load(model, "cpu") or a.loading:          # what the server does at each options change
                a.start_load(model, "cpu")
            requests.append(asyncio.ensure_future(a.infill(
                InfillRequest.single(f"def f{i}(x):\n    return ", "\n", 4), DecodeSettings(steps=2), CancelToken())))
            await asyncio.sleep(0)
        disk.set()
        for request in requests:
            assert (await request).candidates                      # every keystroke's request answered
        engine = await a.ready_engine()
        assert engine.denoiser.name == "other" and a.status()["error"] is None
        assert sorted(name for name, _ in built) == ["other", "tiny"], built   # one load per model, not per switch
        assert host.status()["modelsLoaded"] == 1
        gone = next(ref for name, ref in built if name == "tiny")
        assert await freed(gone), "the model switched away from is still in memory"
    finally:
        disk.set()
        host.shutdown()

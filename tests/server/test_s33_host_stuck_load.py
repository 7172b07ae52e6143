"""A load that does not finish (a stuck disk, a network mount that hangs): dllm/status says how long
it has been loading, and the wait a request gets is counted from the load's start, so requests
after the limit get the clear error at once instead of each waiting the whole limit again. The
load is the real one of a tiny model, held back first (nothing here can make a disk hang)."""
import asyncio
import threading

import pytest

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.server.model_host import ModelHost, ModelUnavailable, local_engine


async def settled(task: asyncio.Future, turns: int = 20) -> bool:
    """Whether `task` finishes within a few turns of the event loop (no timer involved: a request
    waiting on the load's timeout would need one)."""
    for _ in range(turns):
        if task.done():
            return True
        await asyncio.sleep(0)
    return task.done()


async def test_a_stuck_load_reports_its_age_and_later_requests_fail_at_once(tiny_model_dir):
    disk = threading.Event()

    def held_back(model: str, device: str):
        disk.wait(60)            # the folder's files do not come back until the test lets them
        return local_engine(model, device)

    host = ModelHost(connect=held_back)
    host.load_wait_s = 0.3
    a, b = host.view(), host.view()
    try:
        a.start_load(str(tiny_model_dir), "cpu")
        status = a.status()
        assert status["loading"] and status["loadingSeconds"] is not None and status["loadingSeconds"] >= 0, status
        with pytest.raises(ModelUnavailable, match="still loading after"):
            await a.ready_engine()                          # the first request waits the limit out
        assert a.status()["loadingSeconds"] >= 0.3          # at least the wait it has just had
        # A second request, and another connection's for the same model: past the limit already,
        # they are told at once (each waited the whole limit again, and again, while it hung).
        for view in (a, b):
            if view is b:
                b.start_load(str(tiny_model_dir), "cpu")   # shares the load in progress
            request = asyncio.ensure_future(view.ready_engine())
            assert await settled(request), "a request waited again for a load already past the limit"
            with pytest.raises(ModelUnavailable, match="still loading after"):
                request.result()
        assert b.status()["loadingSeconds"] >= 0.3          # the shared load's age, not b's
        disk.set()                                          # the disk comes back: the load ends
        engine = await host.load(str(tiny_model_dir), "cpu")
        assert await a.ready_engine() is engine and a.status()["loadingSeconds"] is None
        assert a.status()["loaded"] and b.status()["loaded"]
    finally:
        disk.set()
        host.shutdown()


async def test_a_load_whose_connection_left_is_named_as_loading_in_a_refusal(tmp_path, tiny_model_dir):
    # It is kept (a load beside it would overrun max_models), but the refusal said every model was
    # "in use by other connections" while none was: a load was running, or hung, for no one.
    stuck, wanted = str(tiny_model_dir), str(write_tiny_model(tmp_path / "other", seed=1))
    disk = threading.Event()

    def held_back(model: str, device: str):
        if model == stuck:
            disk.wait(60)
        return local_engine(model, device)

    host = ModelHost(connect=held_back, max_models=1)
    a, b = host.view(), host.view()
    try:
        loading = a.start_load(stuck, "cpu")
        a.release()                                         # its connection closed mid-load
        with pytest.raises(ModelUnavailable, match=r"\(tiny on cpu \(still loading\)\).*or still loading"):
            b.start_load(wanted, "cpu")
        assert "still loading" in b.status()["error"]
        disk.set()
        await asyncio.shield(loading)                       # once it has loaded, nobody's: evicted for b
        assert (await b.ready_engine()).denoiser.name == "other"
    finally:
        disk.set()
        host.shutdown()

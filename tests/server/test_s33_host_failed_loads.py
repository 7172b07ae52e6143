"""Loads that fail, asked for again once their folder is fixed: the model host's bound on models
holds for them too, and every connection that shared the failed load gets the fixed model, not
only the one that asked again. Real loads of tiny folders (no stand-in engine)."""
import asyncio
import shutil

import pytest

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.checkpoints.tiny import write_tiny_checkpoint
from dllm_lsp.server.model_host import ModelHost, ModelUnavailable

from .test_s33_host_warm_up import write_unrunnable_checkpoint


async def test_a_fixed_folder_asked_for_again_still_needs_room(tmp_path, tiny_model_dir):
    # It was loaded "in place" of its failed load, which held no room: two models in a server
    # of one, while the other was in use.
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "config.json").write_text("{not json")
    host = ModelHost(max_models=1)
    a, b = host.view(), host.view()
    try:
        with pytest.raises(Exception, match="not valid JSON"):
            await a.load(str(broken), "cpu")
        used = await b.load(str(tiny_model_dir), "cpu")       # the one room, in use by b
        shutil.rmtree(broken)
        write_tiny_model(broken, seed=3)                       # the user fixes the folder ...
        with pytest.raises(ModelUnavailable, match="at most 1 model"):
            await a.load(str(broken), "cpu")                   # ... but b still uses the room
        assert host.status()["modelsLoaded"] == 1 and b.engine is used
        b.release()
        fixed = await a.ready_engine()                         # a's next request: room now
        assert fixed.denoiser.name == "broken" and host.status()["modelsLoaded"] == 1
    finally:
        host.shutdown()


async def test_connections_sharing_a_failed_load_all_get_the_fixed_model(tmp_path):
    folder = write_unrunnable_checkpoint(tmp_path / "odd-heads")
    host = ModelHost()
    a, b = host.view(), host.view()
    try:
        loading = a.start_load(str(folder), "cpu")
        assert b.start_load(str(folder), "cpu") is loading     # asked at the same time: one load
        for view in (a, b):
            with pytest.raises(ModelUnavailable, match="odd-heads cannot run"):
                await view.ready_engine()
        write_tiny_checkpoint(folder, "open-dcoder", shards=1)   # fixed; a asks again
        engine = await a.load(str(folder), "cpu")
        # b kept the old failure, every request refused, while a used the model it names.
        assert await b.ready_engine() is engine
        assert b.status()["loaded"] and b.status()["error"] is None
        await asyncio.sleep(0)
        assert host.status()["modelsLoaded"] == 1
    finally:
        host.shutdown()


async def test_another_connections_refusal_leaves_a_failed_load_its_error(tmp_path, models_xyz):
    # The refused connection's search for room evicted the failed load (which held no room):
    # its connection's status then said nothing, and its requests "the model has not been loaded yet".
    broken, y, z = models_xyz
    host = ModelHost(max_models=1)
    a, b, c = host.view(), host.view(), host.view()
    try:
        with pytest.raises(Exception, match="not valid JSON"):
            await a.load(broken, "cpu")
        await b.load(y, "cpu")
        with pytest.raises(ModelUnavailable, match="at most 1 model"):
            c.start_load(z, "cpu")                                # b's model holds the only room
        assert a.status()["model"] == "broken" and "not valid JSON" in a.status()["error"]
        with pytest.raises(ModelUnavailable, match="not valid JSON"):
            await a.ready_engine()
    finally:
        host.shutdown()


@pytest.fixture
def models_xyz(tmp_path, tiny_model_dir):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    (broken / "config.json").write_text("{not json")
    return str(broken), str(write_tiny_model(tmp_path / "y", seed=1)), str(write_tiny_model(tmp_path / "z", seed=2))

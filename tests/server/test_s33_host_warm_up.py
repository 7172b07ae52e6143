"""A model that loads but cannot run: its warm-up (its first infill) raises. The load fails with
that error (dllm/status and every request say why) instead of serving a model that fails every
request, and the user who fixes the folder and sends the options again gets it. Real server over
stdio, real loader, a real (tiny, broken) checkpoint folder."""
import asyncio
import gc
import json
from pathlib import Path

from lsprotocol import types

from dllm_lsp.checkpoints.architecture import BidirectionalLM
from dllm_lsp.checkpoints.tiny import write_tiny_checkpoint
from dllm_lsp.engine.engine import out_of_memory
from dllm_lsp.server.model_host import ModelHost, ModelUnavailable

from .lsp_harness import inline_params, open_doc, start_server, stop_server, wait_loaded, wait_until

URI = "file:///warm/area.py"
TEXT = "def area(width, height):\n    return \n"


def write_unrunnable_checkpoint(folder: Path) -> Path:
    """An Open-dCoder (Qwen2) folder whose every file passes the loader's checks -- config keys,
    tensor names and shapes all agree -- but whose model has 8 positions
    (`max_position_embeddings`): the warm-up's first infill has no room for its context and
    raises, as every request would. (The reproducer was an odd `head_dim`, which the loader now
    refuses itself: checkpoints/config_values.head_width. If the loader learns to refuse this one
    too, the warm-up guard needs another model that loads but cannot run.)"""
    write_tiny_checkpoint(folder, "open-dcoder", shards=1)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = 8
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# What the warm-up's failure says (the engine's CanvasTooSmall), in dllm/status and each refusal.
CANNOT_RUN = "leave no room for context in 8 positions"


async def test_a_model_whose_first_forward_fails_fails_its_load_and_loads_once_fixed(tmp_path):
    folder = write_unrunnable_checkpoint(tmp_path / "no-room")
    options = {"model": str(folder), "device": "cpu"}
    client, seen, _ = await start_server(tmp_path, options)
    try:
        status = await wait_loaded(client, 120)
        # It used to say loaded, with no error, and every completion then failed with InternalError.
        assert not status["loaded"] and status["model"] == "no-room", status
        assert "cannot run" in status["error"] and CANNOT_RUN in status["error"], status
        # The status carries the error as soon as the load fails; the window message is sent after
        # it, so it may still be on its way when the status is answered.
        await wait_until(lambda: any("cannot run" in m.message for m in seen.messages), 30)
        open_doc(client, URI, TEXT)
        try:
            await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 60)
        except Exception as exc:
            assert getattr(exc, "code", None) == -32803, exc
            assert "no-room cannot run" in str(exc) and CANNOT_RUN in str(exc), exc
        else:
            raise AssertionError("a request was answered by a model that cannot run")

        write_tiny_checkpoint(folder, "open-dcoder", shards=1)     # the user fixes the folder ...
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=options))   # ... and asks again
        status = await wait_loaded(client, 120)   # the notification is handled (the load started) before this
        assert status["loaded"] and status["error"] is None, status
        answer = await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 120)
        assert answer is not None
    finally:
        await stop_server(client)


def live_models() -> int:
    gc.collect()
    return sum(type(o) is BidirectionalLM for o in gc.get_objects())


async def test_a_model_that_cannot_run_is_not_kept_in_memory_by_its_error(tmp_path):
    # The failed load's error stays while a connection asks for the model (to tell it why), and it
    # held the warm-up's traceback, whose frames held the whole model.
    folder = write_unrunnable_checkpoint(tmp_path / "no-room")
    host = ModelHost()
    a = host.view()
    before = live_models()
    try:
        try:
            await a.load(str(folder), "cpu")
        except ModelUnavailable:
            raise
        except Exception as exc:
            assert "no-room cannot run" in str(exc) and CANNOT_RUN in str(exc)
        else:
            raise AssertionError("a model that cannot run was loaded")
        assert "cannot run" in a.status()["error"]             # still told, to the connection that asked
        assert live_models() == before, "the model that cannot run is still in memory"
    finally:
        host.shutdown()


def test_cublas_failing_to_allocate_counts_as_out_of_memory():
    # A full GPU fails cuBLAS's handle or workspace allocation with a plain RuntimeError, not
    # torch's OutOfMemoryError: the warm-up must still serve (a smaller request may fit) rather
    # than fail the load as a model that cannot run.
    assert out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"))
    assert not out_of_memory(RuntimeError("The size of tensor a (15) must match the size of tensor b (16)"))

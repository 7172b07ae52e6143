"""A model that loads but cannot run: its warm-up's first forward pass raises. The load fails with
that error (dllm/status and every request say why) instead of serving a model that fails every
request, and the user who fixes the folder and sends the options again gets it. Real server over
stdio, real loader, a real (tiny, broken) checkpoint folder."""
import asyncio
import gc
import json
from pathlib import Path

from lsprotocol import types
from torch import nn

from dllm_lsp.checkpoints.architecture import BiConfig, BidirectionalLM
from dllm_lsp.checkpoints.families import OPEN_DCODER, tensor_names
from dllm_lsp.checkpoints.tiny import write_safetensors, write_tiny_checkpoint
from dllm_lsp.engine.engine import out_of_memory
from dllm_lsp.server.model_host import ModelHost, ModelUnavailable

from .lsp_harness import inline_params, open_doc, start_server, stop_server, wait_loaded, wait_until

URI = "file:///warm/area.py"
TEXT = "def area(width, height):\n    return \n"


def write_unrunnable_checkpoint(folder: Path) -> Path:
    """An Open-dCoder (Qwen2) folder whose every file passes the loader's checks -- config keys,
    tensor names and shapes all agree -- but whose `head_dim` is odd (15): the rotary table is
    built for 16, so the first forward pass raises a shape error."""
    write_tiny_checkpoint(folder, "open-dcoder", shards=1)
    config = json.loads((folder / "config.json").read_text())
    config["head_dim"] = 15
    (folder / "config.json").write_text(json.dumps(config))
    cfg = BiConfig(vocab_size=config["vocab_size"], dim=config["hidden_size"], n_layers=config["num_hidden_layers"],
                   n_heads=config["num_attention_heads"], n_kv_heads=config["num_key_value_heads"], head_dim=15,
                   ffn_dim=config["intermediate_size"], rope_theta=config["rope_theta"],
                   norm_eps=config["rms_norm_eps"], qkv_bias=True, tied_embeddings=config["tie_word_embeddings"])
    model = BidirectionalLM(cfg)
    for p in model.parameters():
        nn.init.normal_(p, 0.0, 0.08)
    names = tensor_names(OPEN_DCODER, cfg)
    write_safetensors(folder, {names[k]: v.contiguous() for k, v in model.state_dict().items() if k in names}, 1)
    return folder


async def test_a_model_whose_first_forward_fails_fails_its_load_and_loads_once_fixed(tmp_path):
    folder = write_unrunnable_checkpoint(tmp_path / "odd-heads")
    options = {"model": str(folder), "device": "cpu"}
    client, seen, _ = await start_server(tmp_path, options)
    try:
        status = await wait_loaded(client, 120)
        # It used to say loaded, with no error, and every completion then failed with InternalError.
        assert not status["loaded"] and status["model"] == "odd-heads", status
        assert "cannot run" in status["error"] and "size of tensor" in status["error"], status
        # The status carries the error as soon as the load fails; the window message is sent after
        # it, so it may still be on its way when the status is answered.
        await wait_until(lambda: any("cannot run" in m.message for m in seen.messages), 30)
        open_doc(client, URI, TEXT)
        try:
            await asyncio.wait_for(client.text_document_inline_completion_async(inline_params(URI, 1, 11)), 60)
        except Exception as exc:
            assert getattr(exc, "code", None) == -32803, exc
            assert "odd-heads cannot run" in str(exc) and "size of tensor" in str(exc), exc
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
    folder = write_unrunnable_checkpoint(tmp_path / "odd-heads")
    host = ModelHost()
    a = host.view()
    before = live_models()
    try:
        try:
            await a.load(str(folder), "cpu")
        except ModelUnavailable:
            raise
        except Exception as exc:
            assert "odd-heads cannot run" in str(exc)
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

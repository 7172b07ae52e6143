"""Which failure the client hears about, and as what: only the planner's refusals are the
client's fault (InvalidParams); an unservable request is RequestFailed; a bug of ours is not
blamed on the client."""
from __future__ import annotations

import pytest
import torch
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.engine.canvas import CanvasTooSmall
from dllm_lsp.planner.types import PlanError
from dllm_lsp.server.errors import REQUEST_FAILED, RequestFailed, answered
from dllm_lsp.server.model_host import ModelUnavailable

from .lsp_harness import inline_params, open_doc, start_server, stop_server, wait_loaded


async def fail_with(error: Exception):
    raise error


async def test_planner_errors_are_invalid_params():
    with pytest.raises(JsonRpcInvalidParams, match="outside the document"):
        await answered(fail_with(PlanError("cursor offset 99 is outside the document (0..3)")))


@pytest.mark.parametrize("error", [ModelUnavailable("no model loaded"), CanvasTooSmall("no room for context")])
async def test_unservable_requests_are_request_failed(error):
    with pytest.raises(RequestFailed) as info:
        await answered(fail_with(error))
    assert info.value.code == REQUEST_FAILED


async def allocate_too_much():
    return torch.empty(2 ** 45, dtype=torch.uint8)      # 32 TiB: the CPU allocator refuses it


@pytest.mark.parametrize("work", [
    allocate_too_much,                                   # a real allocation failure, as torch raises it
    lambda: fail_with(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")),
])
async def test_running_out_of_memory_is_request_failed_saying_what_needs_less(work):
    with pytest.raises(RequestFailed) as info:
        await answered(work())
    assert info.value.code == REQUEST_FAILED
    assert "out of memory" in str(info.value) and "contextTokens" in str(info.value)


async def test_other_runtime_errors_stay_internal_errors():
    with pytest.raises(RuntimeError, match="shape mismatch"):
        await answered(fail_with(RuntimeError("shape mismatch")))


@pytest.mark.parametrize("error", [ValueError("a slot must allow at least one token"), KeyError("x"), TypeError()])
async def test_internal_bugs_are_not_blamed_on_the_client(error):
    # pygls answers whatever escapes a handler with InternalError and logs it as a server fault
    with pytest.raises(type(error)):
        await answered(fail_with(error))


async def test_options_too_big_for_the_model_get_request_failed_not_invalid_params(tmp_path):
    short = write_tiny_model(tmp_path / "short", max_positions=256)     # a 512-token slot cannot fit
    client, _, _ = await start_server(tmp_path, {"model": str(short), "device": "cpu", "maxLineTokens": 512,
                                                 "companionEdits": False})
    try:
        assert (await wait_loaded(client))["loaded"]
        uri = "file:///tmp/too_big.py"
        open_doc(client, uri, "x = 1\nprint(x)\n")
        with pytest.raises(JsonRpcException) as info:
            await client.text_document_inline_completion_async(inline_params(uri, 0, 4))
        assert info.value.code == REQUEST_FAILED and "room for context" in str(info.value)
    finally:
        await stop_server(client)

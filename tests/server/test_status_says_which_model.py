"""dllm/status through the real server over stdio: after a load that failed it names the model the
options mean (as a loaded model is named), not the words `default`, with the device tried and
the load's error; and `contextTokens` has an upper bound, refused like any out-of-range option
(docs/protocol.md). A probe saw `"model": "default"` after a bad `device`, and a `contextTokens`
of 10^12 taken and reported as the budget."""
from __future__ import annotations

import pytest
from lsprotocol import types

from dllm_lsp.loader import default_model_path
from dllm_lsp.options import MAX_CONTEXT_TOKENS

from .lsp_harness import start_server, stop_server, wait_loaded, wait_until

pytestmark = pytest.mark.timeout(120)


async def status(client) -> dict:
    answer = await client.protocol.send_request_async("dllm/status", {})
    return answer._asdict() if hasattr(answer, "_asdict") else answer


@pytest.mark.parametrize("model", ["default", "tiny"])
async def test_a_load_on_a_device_that_does_not_exist_names_the_model_it_meant(tmp_path, tiny_model_dir, model):
    asked = str(tiny_model_dir) if model == "tiny" else model
    client, _, _ = await start_server(tmp_path, {"model": asked, "device": "nosuchdevice"})
    try:
        now = await wait_loaded(client)
    finally:
        await stop_server(client)
    meant = tiny_model_dir.name if model == "tiny" else default_model_path(None).name   # a CPU's default
    assert now["model"] == meant and now["model"] != "default", now
    assert now["device"] == "nosuchdevice" and now["loaded"] is False and now["loading"] is False, now
    assert "unknown device 'nosuchdevice'" in now["error"], now


async def test_a_model_folder_that_does_not_exist_is_named_as_asked(tmp_path):
    missing = str(tmp_path / "no-such-model")
    client, _, _ = await start_server(tmp_path, {"model": missing, "device": "cpu"})
    try:
        now = await wait_loaded(client)
    finally:
        await stop_server(client)
    assert now["model"] == missing and now["loaded"] is False and "does not exist" in now["error"], now


async def test_context_tokens_above_the_bound_are_refused_and_the_budget_stays(tmp_path, tiny_model_dir):
    client, seen, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu",
                                                    "contextTokens": 512})
    try:
        await wait_loaded(client)
        for value in (10 ** 12, MAX_CONTEXT_TOKENS + 1):
            told = len(seen.messages)
            client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
                settings={"dllm": {"contextTokens": value, "steps": 4}}))
            await wait_until(lambda: len(seen.messages) > told)
            assert len(seen.messages) == told + 1, seen.messages[told:]
            message = seen.messages[-1].message
            assert "contextTokens" in message and f"16..{MAX_CONTEXT_TOKENS}" in message, message
            assert (await status(client))["contextTokens"] == 512
        told = len(seen.messages)
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
            settings={"dllm": {"contextTokens": MAX_CONTEXT_TOKENS}}))
        assert (await status(client))["contextTokens"] == MAX_CONTEXT_TOKENS      # the bound itself is taken
        assert len(seen.messages) == told
    finally:
        await stop_server(client)

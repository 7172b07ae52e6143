"""workspace/didChangeConfiguration with a `dllm` section that is not an object (docs/protocol.md,
options): it is refused whole and the client is told why, and the options stay; `dllm: null` sets
nothing. A probe sent `{"dllm": []}`: the server read the whole settings object as the options,
and said only "unknown options ignored: dllm" in its log."""
from lsprotocol import types

from .lsp_harness import start_server, stop_server, wait_loaded, wait_until


async def status(client) -> dict:
    answer = await client.protocol.send_request_async("dllm/status", {})
    return answer._asdict() if hasattr(answer, "_asdict") else answer


async def test_a_dllm_section_that_is_not_an_object_is_told_and_changes_nothing(tmp_path, tiny_model_dir):
    client, seen, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu",
                                                    "contextTokens": 512})
    try:
        await wait_loaded(client)

        def configure(settings) -> None:
            client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))

        for section in ([], "fast", 7):
            told = len(seen.messages)
            configure({"dllm": section, "contextTokens": 300})
            await wait_until(lambda: len(seen.messages) > told)
            message = seen.messages[-1]
            assert message.type == types.MessageType.Error
            assert "the dllm section must be a JSON object" in message.message
            assert (await status(client))["contextTokens"] == 512

        told = len(seen.messages)
        configure({"dllm": None})
        configure({"dllm": {"contextTokens": 300}})
        # notifications are served in order, before the request that follows them
        assert (await status(client))["contextTokens"] == 300
        assert len(seen.messages) == told
    finally:
        await stop_server(client)

"""Settings pulled with workspace/configuration (LSP 3.17), through the real server over stdio.

A probe found that a client of the pull model (VS Code's language client, Neovim's, Helix, Zed,
eglot) had its settings ignored: `didChangeConfiguration` with `settings: null` changed nothing,
and the server never asked for its section. Now a client that declares
`workspace.configuration` is asked for the `dllm` section after `initialized` (the model loads
once the answer is in, bounded) and again at each didChangeConfiguration without dllm settings;
a client without the capability is never asked, and pushed settings work as before."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from lsprotocol import types

from .lsp_harness import inline_params, make_client, open_doc, start_server, stop_server, wait_loaded, wait_until


class Settings:
    """The client's side of workspace/configuration: what it was asked, what it answers. An answer
    is a value, or an exception to answer with an error; `gate`, when set, holds the answer until
    the test opens it (a client that does not answer)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[types.ConfigurationParams] = []
        self.gate: asyncio.Event | None = None

    async def __call__(self, params: types.ConfigurationParams) -> Any:
        self.asked.append(params)
        answer = self.answer   # as it was when asked, as an editor reads its settings then
        if self.gate is not None:
            await self.gate.wait()
        if isinstance(answer, Exception):
            raise answer
        return answer


def answers(client, settings: Settings) -> None:
    @client.feature(types.WORKSPACE_CONFIGURATION)
    async def configuration(params: types.ConfigurationParams) -> Any:
        return await settings(params)


async def start_pulling(tmp_path: Path, init_options: dict, settings: Settings, gate: bool = False):
    """The real server, and a client that declares workspace.configuration and answers it."""
    client, seen = make_client()
    logged: list[types.LogMessageParams] = []
    answers(client, settings)

    @client.feature(types.WINDOW_LOG_MESSAGE)
    def log_message(params: types.LogMessageParams) -> None:
        logged.append(params)

    if gate:
        settings.gate = asyncio.Event()
    log = tmp_path / "server.log"
    await client.start_io(sys.executable, "-m", "dllm_lsp", "serve", "--stdio", "--log-file", str(log))
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(
            window=types.WindowClientCapabilities(work_done_progress=True),
            workspace=types.WorkspaceClientCapabilities(configuration=True, apply_edit=True),
        ),
        initialization_options=init_options,
    ))
    client.initialized(types.InitializedParams())
    return client, seen, logged, log


async def status(client) -> dict:
    answer = await client.protocol.send_request_async("dllm/status", {})
    return answer._asdict() if hasattr(answer, "_asdict") else answer


async def context_tokens_become(client, value: int) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while (await status(client))["contextTokens"] != value:
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"contextTokens never became {value}: {await status(client)}")
        await asyncio.sleep(0.05)


def configuration_changed(client, settings: Any) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))


def warnings(logged: list[types.LogMessageParams]) -> list[str]:
    return [m.message for m in logged if m.type == types.MessageType.Warning]


async def test_the_section_is_pulled_before_the_load_and_at_each_change_without_settings(tmp_path, tiny_model_dir):
    # the model and device come only from the pulled section: the load must wait for the answer
    settings = Settings([{"model": str(tiny_model_dir), "device": "cpu", "contextTokens": 300,
                          # VS Code's pulled section holds the extension's own settings too
                          "enabled": True, "streaming": False, "server": {"command": [], "token": "secret"}}])
    client, seen, logged, _ = await start_pulling(tmp_path, {}, settings)
    try:
        loaded = await wait_loaded(client)
        assert loaded["loaded"] and loaded["device"] == "cpu", loaded
        assert (await status(client))["contextTokens"] == 300
        asked = settings.asked[0].items
        assert [(item.section, item.scope_uri) for item in asked] == [("dllm", None)]
        # one load, of the pulled model: not the default first and the pulled one after it
        await wait_until(lambda: any(p.value["kind"] == "end" for p in seen.progress))
        begins = [p.value["message"] for p in seen.progress if p.value["kind"] == "begin"]
        assert begins == [f"loading model {tiny_model_dir}"], begins
        assert not [w for w in warnings(logged) if "unknown options" in w], logged

        # the pull model's notification: settings null, or other sections only
        for pushed, value in ((None, 200), ({"python": {"analysis": {}}}, 250)):
            settings.answer = [{"model": str(tiny_model_dir), "device": "cpu", "contextTokens": value}]
            asks = len(settings.asked)
            configuration_changed(client, pushed)
            await context_tokens_become(client, value)
            assert len(settings.asked) == asks + 1
        assert not [w for w in warnings(logged) if "python" in w], logged

        # pushed settings still apply as they are, without a pull
        asks = len(settings.asked)
        configuration_changed(client, {"dllm": {"contextTokens": 400}})
        assert (await status(client))["contextTokens"] == 400
        configuration_changed(client, {"contextTokens": 410})
        assert (await status(client))["contextTokens"] == 410
        assert len(settings.asked) == asks
    finally:
        await stop_server(client)


async def test_an_error_null_or_junk_answer_is_a_warning_and_changes_nothing(tmp_path, tiny_model_dir):
    settings = Settings([{"contextTokens": 300}])
    client, seen, logged, _ = await start_pulling(
        tmp_path, {"model": str(tiny_model_dir), "device": "cpu"}, settings)
    try:
        await wait_loaded(client)
        assert (await status(client))["contextTokens"] == 300
        for answer, said in ((RuntimeError("no settings here"), "workspace/configuration failed"),
                             (None, "the result must be an array"),
                             ("fast", "the result must be an array"),
                             ({}, "the result must be an array"),
                             ([], "0 values for the one section"),
                             ([7], "the dllm section is 7, not an object"),
                             ([["steps", 4]], 'the dllm section is ["steps", 4], not an object')):
            settings.answer = answer
            told = len(warnings(logged))
            configuration_changed(client, None)
            await wait_until(lambda: len(warnings(logged)) > told)
            assert said in warnings(logged)[-1], (answer, warnings(logged)[-1])
            assert "the options stay" in warnings(logged)[-1]
            assert (await status(client))["contextTokens"] == 300

        # null for the section: the client has no dllm settings (LSP), quietly nothing changes
        settings.answer = [None]
        asks, told, shown = len(settings.asked), len(logged), len(seen.messages)
        configuration_changed(client, None)
        await wait_until(lambda: len(settings.asked) > asks)
        assert (await status(client))["contextTokens"] == 300

        # a bad value is refused as a pushed one is (one schema), the others apply
        settings.answer = [{"contextTokens": 200, "steps": "many"}]
        configuration_changed(client, None)
        await context_tokens_become(client, 200)
        assert len(seen.messages) == shown + 1 and len(logged) == told, (seen.messages[shown:], logged[told:])
        assert seen.messages[-1].type == types.MessageType.Error
        assert "workspace/configuration: steps ignored" in seen.messages[-1].message
    finally:
        await stop_server(client)


async def test_a_client_that_does_not_answer_does_not_hold_the_load(tmp_path, tiny_model_dir):
    settings = Settings([{"contextTokens": 200}])
    client, _, _, log = await start_pulling(
        tmp_path, {"model": str(tiny_model_dir), "device": "cpu", "contextTokens": 512}, settings, gate=True)
    try:
        # asked at once, before anything loads; a completion asked meanwhile waits for the load
        # (the bounded wait, then the load) instead of finding no model at all
        open_doc(client, "file:///a.py", "def add(a, b):\n    return \n")
        answer = await client.text_document_inline_completion_async(inline_params("file:///a.py", 1, 11))
        assert answer is not None
        loaded = await wait_loaded(client)
        assert loaded["loaded"], loaded
        assert len(settings.asked) == 1 and (await status(client))["contextTokens"] == 512

        settings.gate.set()   # the late answer applies when it comes
        await context_tokens_become(client, 200)

        # an answer to a pull asked before a push is older than the push: dropped
        settings.gate.clear()
        settings.answer = [{"contextTokens": 250}]
        configuration_changed(client, None)
        await wait_until(lambda: len(settings.asked) == 2)
        configuration_changed(client, {"dllm": {"contextTokens": 400}})
        assert (await status(client))["contextTokens"] == 400
        settings.gate.set()
        await wait_until(lambda: "superseded by newer settings" in log.read_text(encoding="utf-8"))
        assert (await status(client))["contextTokens"] == 400
    finally:
        await stop_server(client)


async def test_a_client_without_the_capability_is_never_asked(tmp_path, tiny_model_dir):
    client, _, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu",
                                                 "contextTokens": 300})
    # start_server's client declares no workspace.configuration; it would answer if asked
    settings = Settings([{"contextTokens": 200}])
    answers(client, settings)
    try:
        await wait_loaded(client)
        configuration_changed(client, None)
        configuration_changed(client, {"python": {}})   # as today: read as options, unknown keys named
        assert (await status(client))["contextTokens"] == 300
        assert settings.asked == []
    finally:
        await stop_server(client)

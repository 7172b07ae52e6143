"""workspace/applyEdit and the client's capability, through the real server over stdio.

`dllm.applyCompanionEdit` needs no model output (the import is given), so the edit it asks the
client to apply is known; `dllm.fillHoles` asks the same way (`ask_to_apply`)."""
from __future__ import annotations

import asyncio
import sys
import time

import pytest
from lsprotocol import types
from server.lsp_harness import make_client, open_doc, stop_server

from dllm_lsp.server.multisite_handlers import APPLY_EDIT_TIMEOUT_S

pytestmark = pytest.mark.timeout(120)

URI = "file:///tmp/apply_capability.py"
TEXT = "import os\n\n\nprint(sys.argv)\n"


async def start(tmp_path, tiny_model_dir, workspace: types.WorkspaceClientCapabilities):
    """The server, initialized by a client with these workspace capabilities, and the
    applyEdit requests that client receives (it never answers them)."""
    client, _ = make_client()
    asked: list[types.ApplyWorkspaceEditParams] = []
    never = asyncio.Event()

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    async def apply_edit(params: types.ApplyWorkspaceEditParams):
        asked.append(params)
        await never.wait()            # a client that does not answer
        return types.ApplyWorkspaceEditResult(applied=False)

    await client.start_io(sys.executable, "-m", "dllm_lsp", "serve", "--stdio",
                          "--log-file", str(tmp_path / "server.log"))
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(workspace=workspace),
        initialization_options={"model": str(tiny_model_dir), "device": "cpu"},
    ))
    client.initialized(types.InitializedParams())
    open_doc(client, URI, TEXT, "python")
    return client, asked, never


async def companion(client) -> dict:
    params = types.ExecuteCommandParams(command="dllm.applyCompanionEdit", arguments=[URI, "import sys"])
    answer = await client.workspace_execute_command_async(params)
    return answer._asdict() if hasattr(answer, "_asdict") else answer


@pytest.mark.parametrize("workspace, said", [
    (types.WorkspaceClientCapabilities(apply_edit=False), "workspace.applyEdit is false"),
    (None, "workspace.applyEdit was not declared"),
    (types.WorkspaceClientCapabilities(), "workspace.applyEdit was not declared"),
], ids=["applyEdit-false", "no-workspace-capabilities", "workspace-without-applyEdit"])
async def test_a_client_that_cannot_apply_edits_is_not_asked_and_gets_the_edit(tmp_path, tiny_model_dir, workspace, said):
    """LSP: a server must not send workspace/applyEdit to a client with `applyEdit: false`, and
    reads a capability left out as unsupported. The server sent it to both: the command waited for
    an answer that never came (later 10 s, APPLY_EDIT_TIMEOUT_S). Its answer now carries the edit,
    at once."""
    client, asked, never = await start(tmp_path, tiny_model_dir, workspace)
    try:
        answer = await asyncio.wait_for(companion(client), APPLY_EDIT_TIMEOUT_S)
        assert answer["applied"] is False and "cannot apply edits" in answer["reason"] and said in answer["reason"], answer
        (edit,) = answer["edit"]["changes"][URI]
        assert edit["newText"] == "import sys\n" and edit["range"]["start"] == {"line": 1, "character": 0}
        assert asked == []
    finally:
        never.set()
        await stop_server(client)


async def test_a_client_that_never_answers_apply_edit_gets_an_answer_in_bounded_time(tmp_path, tiny_model_dir):
    client, asked, never = await start(tmp_path, tiny_model_dir, types.WorkspaceClientCapabilities(apply_edit=True))
    try:
        started = time.perf_counter()
        answer = await asyncio.wait_for(companion(client), APPLY_EDIT_TIMEOUT_S + 30)
        waited = time.perf_counter() - started
        assert len(asked) == 1 and APPLY_EDIT_TIMEOUT_S - 1 <= waited
        assert answer["applied"] is False and "did not answer" in answer["reason"]
        status = await client.protocol.send_request_async("dllm/status", {})   # still serving
        assert status is not None
    finally:
        never.set()
        await stop_server(client)

"""`dllm.fillHoles` through the real server over stdio when no hole is filled (docs/multisite.md):
the answer says why, as the other refusals there do. Every site kept its text (here: none fits a
16-token context budget, so no model run is needed to know), or the range held no hole; a probe
got `{"applied": false}` with no reason, which a client could not tell from a fill it had asked
not to apply."""
from __future__ import annotations

import pytest
from lsprotocol import types
from server.lsp_harness import open_doc, start_server, stop_server, wait_loaded

from .samples import HOLES

pytestmark = pytest.mark.timeout(120)

URI = "file:///tmp/nothing_filled.py"


async def fill(client, start: int, end: int) -> dict:
    params = types.ExecuteCommandParams(command="dllm.fillHoles", arguments=[
        URI, {"start": {"line": start, "character": 0}, "end": {"line": end, "character": 0}}])
    answer = await client.workspace_execute_command_async(params)
    return answer._asdict() if hasattr(answer, "_asdict") else answer


async def test_a_fill_that_fills_nothing_says_why(tmp_path, tiny_model_dir):
    client, _, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu", "contextTokens": 16})
    try:
        assert (await wait_loaded(client))["loaded"]
        text = HOLES["python"]
        open_doc(client, URI, text, "python")
        everywhere = await fill(client, 0, text.count("\n"))
        nowhere = await fill(client, 0, 2)                       # `import os` and blank lines: no hole
    finally:
        await stop_server(client)
    sites = everywhere["sites"]
    assert sites and all(s["source"] == "kept" and s["reason"] == "over the context budget" for s in sites), sites
    assert everywhere["applied"] is False and everywhere["edit"] is None
    assert everywhere["reason"] == "no hole could be filled: over the context budget", everywhere
    assert nowhere["applied"] is False and nowhere["sites"] == [], nowhere
    assert nowhere["reason"] == "no hole could be filled: the range holds no hole", nowhere

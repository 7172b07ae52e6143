"""The step scheduler as a client sees it: `serve --step-slack` reaches the scheduler, and
`dllm/status` reports what it counted and learnt after concurrent completions."""
from __future__ import annotations

import asyncio
import sys

import pytest
from lsprotocol import types

from .lsp_harness import inline_params, make_client, open_doc, stop_server, wait_loaded

pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio]

SOURCES = [f"def f{i}(a, b):\n    total = a + b\n    return \n" for i in range(4)]


async def test_status_reports_the_scheduler_after_concurrent_completions(tmp_path, tiny_model_dir):
    client, _ = make_client()
    await client.start_io(sys.executable, "-m", "dllm_lsp", "serve", "--stdio", "--step-slack", "2",
                          "--log-file", str(tmp_path / "server.log"))
    await client.initialize_async(types.InitializeParams(
        capabilities=types.ClientCapabilities(),
        initialization_options={"model": str(tiny_model_dir), "device": "cpu", "steps": 8, "threshold": 1.0}))
    client.initialized(types.InitializedParams())
    try:
        assert (await wait_loaded(client))["loaded"]
        # The load ran a warm-up and a step-cost probe (Engine.prepare) and counts nothing of them.
        before = await client.protocol.send_request_async("dllm/status", {})
        before = before._asdict() if hasattr(before, "_asdict") else before
        prepared = before["prepared"]
        prepared = prepared._asdict() if hasattr(prepared, "_asdict") else prepared
        assert prepared["warmupMs"] > 0 and prepared["probeSteps"] > 0
        counted = before["batching"]
        counted = counted._asdict() if hasattr(counted, "_asdict") else counted
        assert counted["requestSteps"] == 0 and counted["stepCostMs"] is not None
        uris = [f"file:///tmp/doc{i}.py" for i in range(len(SOURCES))]
        for uri, text in zip(uris, SOURCES):
            open_doc(client, uri, text)
        for _ in range(3):       # several rounds of four documents asking at once
            results = await asyncio.gather(*(client.text_document_inline_completion_async(inline_params(uri, 2, 11))
                                             for uri in uris))
            assert all(r is not None for r in results)
        status = await client.protocol.send_request_async("dllm/status", {})
        status = status._asdict() if hasattr(status, "_asdict") else status
        batching = status["batching"]
        batching = batching._asdict() if hasattr(batching, "_asdict") else batching
        assert batching["slack"] == 2.0                       # the command line reached the scheduler
        assert batching["requestSteps"] >= 12 and batching["forwardPasses"] <= batching["requestSteps"]
        assert batching["droppedBeforeStart"] == 0            # nobody cancelled
        cost = batching["stepCostMs"]                         # the probe's, refined by these steps
        cost = cost._asdict() if hasattr(cost, "_asdict") else cost
        assert cost["fixed"] >= 0 and cost["perRow"] >= 0 and cost["perContextRow"] >= 0
    finally:
        await stop_server(client)

"""(c) An infill round trip for every family: engine, `dllm-lsp infill --model FOLDER`, and the server."""
from __future__ import annotations

import io
import json
import sys

import pytest
from lsprotocol import types

from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest

from server.lsp_harness import inline_params, open_doc, start_server, stop_server, wait_loaded

LAYOUTS = ["llada", "dream", "diffucoder", "dreamon", "open-dcoder"]
FAMILY = {"llada": "llada", "dream": "dream", "diffucoder": "dream", "dreamon": "dreamon", "open-dcoder": "open-dcoder"}
PREFIX = "def area(width, height):\n    return "
SUFFIX = "\n\n\nprint(area(2, 3))\n"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_engine_round_trip_is_deterministic(layout, loaded):
    engine = Engine(loaded[layout])
    request = InfillRequest.single(PREFIX, SUFFIX, 12)
    first = engine.infill(request, DecodeSettings(steps=6))
    second = engine.infill(request, DecodeSettings(steps=6))
    assert first.candidates == second.candidates
    assert 1 <= first.steps <= 6 and first.latency_ms > 0
    assert first.tokens_committed <= 12


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cli_infill_with_a_checkpoint_folder(layout, tiny_checkpoints, monkeypatch, capsys):
    """`dllm-lsp infill --model FOLDER` through the CLI entry point (in-process: no interpreter start-up)."""
    from dllm_lsp.cli import main

    lines = [json.dumps({"id": 1, "prefix": PREFIX, "suffix": SUFFIX, "max_tokens": 8}),
             json.dumps({"id": 2, "prefix": "x = ", "suffix": "\n"})]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    code = main(["infill", "--model", str(tiny_checkpoints[layout]), "--device", "cpu", "--steps", "4",
                 "--max-tokens", "6"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = [json.loads(line) for line in captured.out.splitlines()]
    assert [o["id"] for o in out] == [1, 2]
    for reply in out:
        assert set(reply) == {"id", "completion", "steps", "latency_ms"}
        assert isinstance(reply["completion"], str) and 1 <= reply["steps"] <= 4


def test_cli_reports_a_broken_checkpoint_clearly(fresh_copy, monkeypatch, capsys):
    from dllm_lsp.cli import main

    folder = fresh_copy("llada")
    (folder / "model-00001-of-00002.safetensors").unlink()
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["infill", "--model", str(folder), "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dllm-lsp: error:") and "model-00001-of-00002.safetensors" in err


@pytest.mark.timeout(240)
async def test_server_serves_every_family_from_its_folder(tmp_path, tiny_checkpoints):
    """One server; the `model` option points at each family's folder in turn."""
    uri = "file:///tmp/area.py"
    client, seen, _ = await start_server(tmp_path, {"model": str(tiny_checkpoints["llada"]), "device": "cpu",
                                                    "steps": 4})
    try:
        open_doc(client, uri, PREFIX + SUFFIX)
        last_latency = None
        for layout in LAYOUTS:
            if layout != "llada":
                client.workspace_did_change_configuration(
                    types.DidChangeConfigurationParams(settings={"dllm": {"model": str(tiny_checkpoints[layout])}})
                )
            status = await wait_loaded(client)
            if status.get("model") != tiny_checkpoints[layout].name:
                status = await _wait_for_model(client, tiny_checkpoints[layout].name)
            assert status["loaded"] and not status["error"], status
            assert status["family"] == FAMILY[layout]
            result = await client.text_document_inline_completion_async(inline_params(uri, 1, 11))
            # A random model's text may fail the server's parse check (then no item); when an item
            # comes back it sits at the cursor. Either way the model must have denoised the request.
            assert isinstance(result, types.InlineCompletionList), layout
            for item in result.items:
                assert item.range.start == types.Position(line=1, character=11)
            after = await wait_loaded(client)
            assert after["lastLatencyMs"] is not None and after["lastLatencyMs"] != last_latency, layout
            last_latency = after["lastLatencyMs"]
    finally:
        await stop_server(client)


async def _wait_for_model(client, name: str, timeout: float = 60.0) -> dict:
    import asyncio

    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await wait_loaded(client)
        if status.get("model") == name or status.get("error"):
            return status
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"server never switched to {name}: {status}")
        await asyncio.sleep(0.1)

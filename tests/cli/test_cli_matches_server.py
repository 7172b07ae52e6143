"""`dllm-lsp complete` and the language server give the same completion for the same file and
position: both go through dllm_lsp.pipeline (planner, companion import slot, one context budget),
so they denoise the same canvas. Real CLI subprocess, real server over stdio, same tiny model."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from lsprotocol import types

from tests.server.lsp_harness import inline_params, open_doc, start_server, stop_server, wait_loaded

# A file with an import block, so the companion slot is part of the canvas on both sides.
SOURCE = "import os\n\n\ndef area(width, height):\n    return \n\n\nprint(area(2, 3))\n"
LINE, COL = 5, 12          # 1-based: after `return ` (LSP position 4:11)

pytestmark = pytest.mark.timeout(300)


def cli_complete(path, model_dir, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "dllm_lsp", "complete", f"{path}:{LINE}:{COL}", "--model", str(model_dir),
         "--device", "cpu", "--json", *extra],
        capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


async def server_complete(tmp_path, model_dir, uri: str, options: dict) -> types.InlineCompletionList:
    client, _, _ = await start_server(tmp_path, {"model": str(model_dir), "device": "cpu", **options})
    try:
        status = await wait_loaded(client)
        assert status["loaded"], status
        open_doc(client, uri, SOURCE)
        return await client.text_document_inline_completion_async(inline_params(uri, LINE - 1, COL - 1))
    finally:
        await stop_server(client)


@pytest.mark.parametrize("steps", [None, 3])
async def test_cli_and_server_return_the_same_completion(tmp_path, tiny_model_dir, steps):
    path = tmp_path / "area.py"
    path.write_text(SOURCE)
    extra = ("--steps", str(steps)) if steps is not None else ()
    cli = cli_complete(path, tiny_model_dir, "--companion-edits", *extra)
    served = await server_complete(tmp_path, tiny_model_dir, path.as_uri(),
                                   {"companionEdits": True, **({"steps": steps} if steps is not None else {})})
    assert cli["completion"], cli            # the tiny model completes here: the comparison is not empty
    assert len(served.items) == 1
    item = served.items[0]
    assert item.insert_text == cli["completion"]
    assert item.range.start == types.Position(line=cli["replace_from"]["line"] - 1,
                                              character=cli["replace_from"]["col"] - 1)
    # the companion import, when the model wrote a valid new one, agrees too
    server_import = item.command.arguments[1] if item.command is not None else None
    assert server_import == (cli.get("companion") or {}).get("import")

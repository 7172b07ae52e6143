"""Token healing through the real server over stdio, with the shipped model.

A HumanEval task opened as a file with its line's indentation typed (what Enter leaves): with the
typed blanks left to the model the server shows a line that makes the program pass; with them in
the prefix the shipped model writes junk and the server shows nothing (docs/eval.md#the-editors-path).
"""
from __future__ import annotations

import pytest
from lsprotocol import types

from dllm_lsp.eval.execution import run_program
from dllm_lsp.eval.tasks import load_tasks, resolve_data

from .lsp_harness import inline_params, open_doc, start_server, stop_server, wait_loaded

TASK_ID = "SingleLineInfilling/HumanEval/55/L3"      # fib: `    return 1` after `if n == 1:`

pytestmark = pytest.mark.timeout(300)


def task_in_editor():
    task = next(t for t in load_tasks(resolve_data("single-line")) if t.task_id == TASK_ID)
    document, cursor = task.in_editor()
    assert document[:cursor].endswith("\n        ")              # the editor typed the indentation
    line = document.count("\n", 0, cursor)
    return task, document, cursor, types.Position(line=line, character=cursor - (document.rfind("\n", 0, cursor) + 1))


@pytest.mark.parametrize("heal", [True, False])
async def test_the_server_completes_a_line_the_editor_indented_only_with_healed_blanks(tmp_path, heal):
    task, document, cursor, position = task_in_editor()
    client, _, _ = await start_server(tmp_path, {"device": "cpu", "healWhitespace": heal})
    try:
        status = await wait_loaded(client)
        assert status["loaded"], status
        uri = (tmp_path / "fib.py").as_uri()
        open_doc(client, uri, document)
        result = await client.text_document_inline_completion_async(inline_params(uri, position.line, position.character))
    finally:
        await stop_server(client)
    items = list(result.items) if result is not None else []
    if not heal:
        assert items == []
        return
    (item,) = items
    assert item.range.start == item.range.end == position        # inserted at the cursor, the typed blanks kept
    assert item.insert_text == item.insert_text.lstrip()
    edited = document[:cursor] + item.insert_text + document[cursor:]
    assert run_program(task.run_as(edited), 20).passed

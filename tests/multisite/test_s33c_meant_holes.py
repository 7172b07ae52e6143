"""Which placeholders a user means, and which holes a cursor is offered.

- A `.pyi` stub file is all signatures: its `...` (and `pass`, `raise NotImplementedError`) are
  meant, and were offered as holes. Its `# TODO` still is one.
- `except ...: pass` swallows an exception on purpose: a fill replaced it with a model's guess.
- A cursor in a function with no holes was offered every hole of the file ("Fill 5 holes with
  dllm", sites far away). It is offered none there now; a cursor outside every function and
  class still gets the file's holes, and the action's title says so ("... in this file").
"""
from __future__ import annotations

import pytest
from lsprotocol import types
from server.lsp_harness import open_doc, start_server, stop_server, wait_loaded

from dllm_lsp.multisite.holes import find_holes, is_stub_file
from dllm_lsp.syntax.snapshot import Snapshot

pytestmark = pytest.mark.timeout(120)

STUB_FILE = (
    "from typing import Any\n"
    "\n"
    "VERSION: str\n"
    "\n"
    "def parse(x: str) -> Any: ...\n"
    "def load(path: str) -> None:\n"
    "    ...\n"
    "\n"
    "class Reader:\n"
    "    name: str\n"
    "    def read(self, n: int = ...) -> bytes: ...\n"
    "    def close(self) -> None:\n"
    "        pass\n"
    "    def seek(self, n: int) -> int:\n"
    "        raise NotImplementedError\n"
    "    # TODO: type the context manager\n"
    "\n"
    "class Empty: ...\n"
)
STUB_PLACEHOLDERS = ["...", "...", "...", "pass", "raise NotImplementedError", "# TODO: type the context manager", "..."]

SWALLOWS = (
    "try:\n"
    "    import numpy\n"
    "except ImportError:\n"
    "    pass\n"
    "\n"
    "\n"
    "def close(f):\n"
    "    try:\n"
    "        f.close()\n"
    "    except OSError:\n"
    "        ...\n"
    "    except* ValueError:\n"
    "        pass\n"
    "    except KeyError:\n"
    "        # TODO: say which key\n"
    "        pass\n"
    "    finally:\n"
    "        pass\n"
    "    if f:\n"
    "        pass\n"
)

FILE = (
    "import os\n"
    "\n"
    "\n"
    "def done(x):\n"
    "    return x + 1\n"
    "\n"
    "\n"
    "def todo(x):\n"
    "    pass\n"
    "\n"
    "\n"
    "class Shape:\n"
    "    def name(self):\n"
    "        return 'shape'\n"
    "\n"
    "    def sides(self):\n"
    "        ...\n"
    "\n"
    "\n"
    "class Done:\n"
    "    def name(self):\n"
    "        return 'done'\n"
)


def hole_texts(text: str, start: int = 0, end: int | None = None, stub_file: bool = False) -> list[str]:
    scope = find_holes(Snapshot.parse(text, "python"), start, len(text) if end is None else end, stub_file=stub_file)
    return [text[h.start:h.end] for h in scope.holes]


def test_a_stub_file_holds_only_its_marker_comments():
    assert hole_texts(STUB_FILE) == STUB_PLACEHOLDERS      # the same text in a .py file
    assert hole_texts(STUB_FILE, stub_file=True) == ["# TODO: type the context manager"]
    cursor = STUB_FILE.index("def close") + 4
    assert hole_texts(STUB_FILE, cursor, cursor, stub_file=True) == ["# TODO: type the context manager"]


@pytest.mark.parametrize("uri, stub", [
    ("file:///w/pkg/mod.pyi", True), ("file:///w/My%20Pkg/mod.pyi", True), ("file:///C:/w/MOD.PYI", True),
    ("file:///w/pkg/mod.py", False), ("file:///w/pkg.pyi/mod.py", False), ("untitled:Untitled-1", False),
    ("file:///w/notes.pyi.txt", False),
])
def test_stub_files_are_known_by_their_uri(uri, stub):
    assert is_stub_file(uri) is stub


def test_an_except_clause_that_swallows_is_no_hole():
    # only the marker comment in an except clause, and `pass` in other clauses, are holes
    assert hole_texts(SWALLOWS) == ["# TODO: say which key", "pass", "pass"]
    assert SWALLOWS.count("pass") == 5      # three of them in except clauses


def test_a_cursor_in_a_function_without_holes_gets_none():
    snapshot = Snapshot.parse(FILE, "python")
    for inside in ["return x + 1", "return 'done'", "class Done"]:
        at = FILE.index(inside) + 2
        scope = find_holes(snapshot, at, at)
        assert scope.holes == [], inside
        assert FILE[scope.start:scope.end].startswith(("def done", "class Done")), inside
    # a method without holes still gets its class's; a function with holes gets its own
    at = FILE.index("return 'shape'")
    assert [FILE[h.start:h.end] for h in find_holes(snapshot, at, at).holes] == ["..."]
    at = FILE.index("def todo") + 1
    assert [FILE[h.start:h.end] for h in find_holes(snapshot, at, at).holes] == ["pass"]
    # outside every function and class: the whole file's
    for at in [0, FILE.index("\n\n\ndef todo") + 1]:
        scope = find_holes(snapshot, at, at)
        assert [FILE[h.start:h.end] for h in scope.holes] == ["pass", "..."]
        assert (scope.start, scope.end) == (0, len(FILE))


@pytest.mark.parametrize("text", [
    "def f(x):\n    # TODO: write f\n\n\ndef g():\n    pass\n",
    "@cache\ndef f(x):\n    # TODO: write f\n\n\ndef g():\n    pass\n",
    "class A:\n    def f(self):\n        # TODO: write f\n\n    def g(self):\n        return 1\n\n\ndef g():\n    pass\n",
    "def f(x):\r    # TODO: write f\r\r\rdef g():\r    pass\r",
])
def test_a_function_whose_body_is_only_a_marker_comment_holds_it(text):
    """tree-sitter-python ends such a function before the comment (an empty block): the cursor on
    `def f` found the comment only by searching the whole file, which it no longer does."""
    at = text.index("def f") + 4
    assert hole_texts(text, at, at) == ["# TODO: write f"]


def action_params(uri: str, text: str, at: int) -> types.CodeActionParams:
    line = text.count("\n", 0, at)
    position = types.Position(line=line, character=at - (text.rfind("\n", 0, at) + 1))
    return types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=types.Range(start=position, end=position),
        context=types.CodeActionContext(diagnostics=[]))


async def test_code_actions_and_fills_through_the_server(tmp_path, tiny_model_dir):
    client, _, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu"})
    try:
        assert (await wait_loaded(client))["loaded"]
        uri = "file:///tmp/s33c_file.py"
        open_doc(client, uri, FILE)
        titles = {}
        for name, at in [("top", 0), ("done", FILE.index("return x + 1")), ("todo", FILE.index("def todo")),
                         ("method", FILE.index("return 'shape'"))]:
            actions = await client.text_document_code_action_async(action_params(uri, FILE, at))
            titles[name] = [a.title for a in actions or []]
        assert titles == {"top": ["Fill 2 holes in this file with dllm"], "done": [],
                          "todo": ["Fill 1 hole with dllm"], "method": ["Fill 1 hole with dllm"]}
        # a selection names no scope: it holds what it shows
        whole = types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=FILE.count("\n"), character=0)),
            context=types.CodeActionContext(diagnostics=[]))
        assert [a.title for a in await client.text_document_code_action_async(whole)] == ["Fill 2 holes with dllm"]

        # a stub file: the command (through the multisite service) and the code action both see it
        stub_uri = "file:///tmp/s33c_stub.pyi"
        open_doc(client, stub_uri, STUB_FILE)
        end = types.Position(line=STUB_FILE.count("\n"), character=0)
        whole_stub = {"start": {"line": 0, "character": 0}, "end": {"line": end.line, "character": 0}}
        fill = await client.workspace_execute_command_async(types.ExecuteCommandParams(
            command="dllm.fillHoles", arguments=[stub_uri, whole_stub, {"apply": False}]))
        sites = [s["label"] for s in fill["sites"]]
        assert sites == ["hole '# TODO: type the context manager'"]
        at_stub = STUB_FILE.index("def parse") + 4
        assert not await client.text_document_code_action_async(action_params(stub_uri, STUB_FILE, at_stub))
        at_close = STUB_FILE.index("def close") + 4
        assert [a.title for a in await client.text_document_code_action_async(
            action_params(stub_uri, STUB_FILE, at_close))] == ["Fill 1 hole with dllm"]
        # the same text as a .py file: its placeholders are holes
        py_uri = "file:///tmp/s33c_stub.py"
        open_doc(client, py_uri, STUB_FILE)
        assert [a.title for a in await client.text_document_code_action_async(
            action_params(py_uri, STUB_FILE, at_stub))] == ["Fill 1 hole with dllm"]
    finally:
        await stop_server(client)

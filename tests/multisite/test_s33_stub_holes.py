"""Placeholders that are what the code means: Python's @overload variants, abstract methods and
Protocol members are written `...` (or `pass`, `raise NotImplementedError`) on purpose; they are
no holes. A cursor in an overload stub was offered "Fill 1 hole with dllm", which wrote a body
into the stub. Rust's placeholder macros count with their path (`std::todo!()`)."""
from __future__ import annotations

import pytest
from lsprotocol import types
from server.lsp_harness import open_doc, start_server, stop_server, wait_loaded

from dllm_lsp.multisite.holes import find_holes
from dllm_lsp.syntax.snapshot import Snapshot

pytestmark = pytest.mark.timeout(120)

STUBS = (
    "import abc\n"
    "from typing import Protocol, overload\n"
    "\n"
    "\n"
    "@overload\n"
    "def parse(x: int) -> int: ...\n"
    "@typing.overload\n"
    "def parse(x: str) -> str:\n"
    "    ...\n"
    "def parse(x):\n"
    "    return x\n"
    "\n"
    "\n"
    "class Shape(abc.ABC):\n"
    "    @abc.abstractmethod\n"
    "    def area(self) -> float:\n"
    "        raise NotImplementedError\n"
    "\n"
    "    @property\n"
    "    @abstractmethod\n"
    "    def name(self) -> str:\n"
    "        pass\n"
    "\n"
    "\n"
    "class Sized(typing.Protocol[T]):\n"
    "    def size(self) -> int: ...\n"
    "    ...\n"
)


def holes(text: str, language: str = "python") -> list[str]:
    snapshot = Snapshot.parse(text, language)
    return [text[h.start:h.end] for h in find_holes(snapshot, 0, len(text)).holes]


def test_overloads_abstract_methods_and_protocols_hold_no_holes():
    assert holes(STUBS) == []


def test_the_same_placeholders_elsewhere_are_holes():
    # a concrete method beside an abstract one, a class that names Protocol only as a member
    text = (
        "class Shape(abc.ABC):\n"
        "    @abc.abstractmethod\n"
        "    def area(self) -> float:\n"
        "        ...\n"
        "\n"
        "    @cache\n"
        "    def name(self) -> str:\n"
        "        raise NotImplementedError\n"
        "\n"
        "\n"
        "class Plain(Base):\n"
        "    class Inner(Protocol):\n"
        "        def f(self): ...\n"
        "    def size(self):\n"
        "        pass\n"
    )
    assert holes(text) == ["raise NotImplementedError", "pass"]


def test_a_marker_comment_in_a_stub_is_still_a_hole():
    text = "@overload\ndef parse(x: int) -> int:\n    # TODO: say what it returns\n    ...\n"
    assert holes(text) == ["# TODO: say what it returns"]


def test_rust_placeholder_macros_with_their_path():
    text = "fn f() -> u32 {\n    std::todo!()\n}\nfn g() -> u32 {\n    core::unimplemented!()\n}\n"
    assert holes(text, "rust") == ["std::todo!()", "core::unimplemented!()"]


async def test_no_code_action_in_an_overload_stub(tmp_path, tiny_model_dir):
    client, _, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu"})
    uri = "file:///tmp/s33_stubs.py"
    try:
        assert (await wait_loaded(client))["loaded"]
        open_doc(client, uri, STUBS)
        for line, character in [(5, 26), (8, 4), (16, 8), (25, 25)]:
            at = types.Position(line=line, character=character)
            actions = await client.text_document_code_action_async(types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri), range=types.Range(start=at, end=at),
                context=types.CodeActionContext(diagnostics=[])))
            assert not actions, (line, character, actions)
    finally:
        await stop_server(client)


def test_a_cursor_on_a_decorator_is_in_its_function():
    text = "def a():\n    pass\n\n\n@decorator(1)\ndef b():\n    ...\n\n\nclass C:\n    @property\n    def d(self):\n        pass\n"
    snapshot = Snapshot.parse(text, "python")
    for at, expected in [(text.index("@decorator") + 3, ["..."]), (text.index("@property") + 2, ["pass"])]:
        scope = find_holes(snapshot, at, at)
        assert [text[h.start:h.end] for h in scope.holes] == expected
        assert text[scope.start:scope.end].startswith("@")

"""`{ | }` on a line at column 0 (every top-level `function f() { | }`, `if (x) { | }`, `fn main()
{ | }`): the body pushed the `}` to a line of its own, behind the blank that stood between the
cursor and it, one column right of the line it closes. The blanks before the `}` counted
towards its indentation, which they can only where the line is indented by them; elsewhere the
span now replaces them. The completion runs through the planner, post-processing and the LSP
items as the server makes them, with the model's text given."""
from __future__ import annotations

import pytest
from pygls.workspace import PositionCodec

from dllm_lsp import pipeline
from dllm_lsp.engine.types import InfillResult
from dllm_lsp.options import Options
from dllm_lsp.server.items import completion_list, inline_list
from dllm_lsp.syntax.snapshot import Snapshot

CASES = [
    ("javascript", "function f() { | }\n", "x = 1;", "function f() { \n  x = 1;\n}\n"),
    ("javascript", "{ | }\n", "foo();", "{ \n  foo();\n}\n"),
    ("javascript", "if (a) {|  }\n", "foo();", "if (a) {\n  foo();\n}\n"),
    ("typescript", "class A { | }\n", "x = 1;", "class A { \n  x = 1;\n}\n"),
    ("rust", "fn main() { | }\n", "let x = 1;", "fn main() { \n    let x = 1;\n}\n"),
    ("c", "int main() { | }\n", "return 0;", "int main() { \n    return 0;\n}\n"),
    # indented lines: the blanks count towards the `}`'s indentation, as before
    ("javascript", "function f() {\n  if (a) { | }\n}\n", "x = 1;", "function f() {\n  if (a) { \n    x = 1;\n  }\n}\n"),
    ("javascript", "function f() {\n  if (a) {|  }\n}\n", "x = 1;", "function f() {\n  if (a) {\n    x = 1;\n  }\n}\n"),
    ("javascript", "{|}\n", "foo();", "{\n  foo();\n}\n"),
]


@pytest.mark.parametrize("language, marked, model_text, expected", CASES)
def test_the_closing_brace_lines_up_with_its_line(language, marked, model_text, expected):
    offset = marked.index("|")
    text = marked.replace("|", "")
    plan = pipeline.plan(Snapshot.parse(text, language), offset, Options())
    completion = plan.finish(InfillResult([[model_text]], 1, 1, 1.0))
    assert completion is not None
    assert text[:completion.start] + completion.text + text[completion.end:] == expected
    assert completion.start == offset and completion.typed_prefix == ""
    codec = PositionCodec()
    inline = inline_list("file:///x", completion, codec).items[0]
    item = completion_list(completion, codec).items[0]
    line = text.count("\n", 0, offset)
    column = offset - (text.rfind("\n", 0, offset) + 1)
    for at in (inline.range, item.text_edit.range):
        # one line, from the cursor: an item's edit must contain the cursor's position (LSP)
        assert (at.start.line, at.start.character) == (line, column) and at.end.line == line
    assert item.filter_text is None

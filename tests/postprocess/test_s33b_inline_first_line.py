"""A body completed after a block header's `{` (header mode) whose first line the model writes
right after the `{`, on the header's line, and its next lines at their depth in the file (which it
reads): the first line's indentation (none) was taken as the base, so every later line went one
step too deep, its closing `}` too (`void f() {‸` + `int x = 1;\n    g(x);\n  }` showed `g(x)` at
8 columns). The body's own depth is their base now. Python keeps the first line's base.

Real tree-sitter parses, plans and post-processing; the model's text is written by hand."""
import pytest

from dllm_lsp.planner.spans import plan_span
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"


def shown_file(language_id: str, source: str, completion: str) -> str | None:
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    plan = plan_span(Snapshot.parse(text, language_id), cursor)
    assert plan.kind == "block_body" and not plan.single_line
    shown = finish(plan, completion)
    return None if shown is None else text[:plan.replace_start] + shown + text[plan.replace_end:]


CASES = [
    # (language, source, the model's text, the file shown)
    ("java", "class A {\n  void f() {‸\n}\n", "int x = 1;\n    g(x);\n  }",
     "class A {\n  void f() {\n    int x = 1;\n    g(x);\n  }\n}\n"),
    ("java", "class A {\n  void f() {‸\n  }\n}\n", " int x = 1;\n    if (x > 0) {\n      g(x);\n    }",
     "class A {\n  void f() {\n    int x = 1;\n    if (x > 0) {\n      g(x);\n    }\n  }\n}\n"),
    ("java", "class A {\n  void f() {‸}\n}\n", "int x = 1;\n    g(x);",
     "class A {\n  void f() {\n    int x = 1;\n    g(x);\n  }\n}\n"),
    ("go", "package p\n\nfunc f() {‸\n}\n", "x := 1\n\tg(x)\n}",
     "package p\n\nfunc f() {\n\tx := 1\n\tg(x)\n}\n"),
    ("javascript", "function f() {‸\n}\n", "const a = 1;\n  return a;\n}",
     "function f() {\n  const a = 1;\n  return a;\n}\n"),
    ("rust", "fn f() -> i32 {‸\n}\n", "let x = 1;\n    x + 1\n}",
     "fn f() -> i32 {\n    let x = 1;\n    x + 1\n}\n"),
    ("c", "int f(void) {\n    if (x) {‸\n    }\n    return 0;\n}\n", "y();\n        z();",
     "int f(void) {\n    if (x) {\n        y();\n        z();\n    }\n    return 0;\n}\n"),
    ("lua", "local function f(x)‸\nend\n", "local y = x\n  return y\nend",
     "local function f(x)\n  local y = x\n  return y\nend\n"),
]


@pytest.mark.parametrize("language_id, source, completion, expected", CASES, ids=[c[0] for c in CASES])
def test_lines_after_an_inline_first_line_keep_their_depth(language_id, source, completion, expected):
    assert shown_file(language_id, source, completion) == expected


@pytest.mark.parametrize("language_id, source, completion, expected", [
    # The model's usual text, starting on the line below the header: as before.
    ("java", "class A {\n  void f() {‸\n}\n", "\n    int x = 1;\n    g(x);\n  }",
     "class A {\n  void f() {\n    int x = 1;\n    g(x);\n  }\n}\n"),
    ("java", "class A {\n  void f() {‸}\n}\n", "return 1;", "class A {\n  void f() {\n    return 1;\n  }\n}\n"),
    # Python: a body on its header's line followed by more lines is no Python; judged as before.
    ("python", "def f():‸\n", "x = 1\n    return x", "def f():\n    x = 1\n"),
], ids=["java-next-line", "java-one-line", "python"])
def test_other_bodies_are_placed_as_before(language_id, source, completion, expected):
    assert shown_file(language_id, source, completion) == expected

"""Multi-line completions outside Python, in a file the user is still typing (broken at the
cursor: a `(` or `{` typed at a line's end that nothing closes yet). The parse check only refuses
a completion that adds an error, and reads a broken file's broken piece alone, so:

- a doubled closer was shown: `const a = g(‸` + `1, 2))` (the line-end closer rule judged one-line
  completions only); a multi-line completion's closers now must close what the file leaves open,
  as a one-line completion's must (cut back line by line, like a worse parse);
- the `}` that closes the block the user opened was cut as a repeat of the suffix's `}` (which is
  the function's): `if x {‸` above a function's last `}` got its body without the `}`, the file
  as broken as before. A closer line the suffix seems to repeat is kept where it closes a
  bracket the file leaves open;
- a completion that closes what the file leaves open (`b = 2,` + `}` under a Lua table, a JS
  object, a Go map, a Python list) was refused or cut before its closer: the region check read the
  broken piece without its opener. A completion with which the whole file parses is not refused.

Real tree-sitter parses, plans and post-processing; the model's text is written by hand, with the
blanks token healing has it write."""
import pytest

from dllm_lsp.planner.spans import plan_span
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"


def shown(language_id: str, source: str, completion: str, crlf: bool = False) -> str | None:
    if crlf:
        source, completion = source.replace("\n", "\r\n"), completion.replace("\n", "\r\n")
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    plan = plan_span(Snapshot.parse(text, language_id), cursor)
    assert not plan.single_line
    result = finish(plan, completion)
    return result.replace("\r\n", "\n") if crlf and result is not None else result


def shown_lf(language_id: str, source: str, completion: str) -> str | None:
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    plan = plan_span(Snapshot.parse(text, language_id), cursor)
    assert not plan.single_line
    return finish(plan, completion)


JS_CALL_OPEN = "function f() {\n  const a = g(‸\n  return a;\n}\n"
RUST_VEC_OPEN = "fn f() {\n    let v = vec![‸\n}\n"

DOUBLED = [
    # (language, source, the model's text, what is shown)
    ("javascript", JS_CALL_OPEN, "1, 2))", None),
    ("javascript", JS_CALL_OPEN, "1,\n    2));", None),
    ("javascript", JS_CALL_OPEN, "1, 2);", "\n    1, 2);"),
    ("rust", RUST_VEC_OPEN, "\n        1,\n        2,\n    ]];", "\n        1,\n        2,"),
    ("rust", RUST_VEC_OPEN, "\n        1,\n        2,\n    ];", "\n        1,\n        2,\n    ];"),
]


@pytest.mark.parametrize("language_id, source, completion, expected", DOUBLED,
                         ids=[f"{c[0]}-{c[2]!r}" for c in DOUBLED])
def test_a_closer_that_closes_nothing_is_not_shown(language_id, source, completion, expected):
    assert shown_lf(language_id, source, completion) == expected


NEEDED = [
    # (language, source, the model's text): the closing line is the completion's own
    ("go", "package p\n\nfunc f() {\n\tif x {‸\n}\n", "\n\t\ty()\n\t}"),
    ("go", "package p\n\nfunc main() {\n\tfor i := 0; i < 10; i++ {‸\n}\n", "\n\t\tfmt.Println(i)\n\t}"),
    ("rust", "fn f() {\n    if x {‸\n}\n", "\n        y();\n    }"),
    ("java", "class A {\n  void f() {‸\n}\n", "\n    y();\n  }"),
    ("c", "int f(void) {\n  while (x) {‸\n}\n", "\n    y();\n  }"),
    ("javascript", "describe('x', () => {\n  it('y', () => {‸\n});\n", "\n    expect(1).toBe(1);\n  });"),
]


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
@pytest.mark.parametrize("language_id, source, completion", NEEDED, ids=[c[0] for c in NEEDED])
def test_a_closer_the_file_leaves_open_is_kept(language_id, source, completion, crlf):
    assert shown(language_id, source, completion, crlf) == completion


REPEATED = [
    # (language, source, the model's text, what is shown): the suffix has the block's closer
    ("go", "package p\n\nfunc f() {\n\tif x {‸\n\t}\n}\n", "\n\t\ty()\n\t}", "\n\t\ty()"),
    ("rust", "fn f() {\n    if x {‸\n    }\n}\n", "\n        y();\n    }", "\n        y();"),
    ("java", "class A {\n  void f() {‸\n  }\n}\n", "\n    y();\n  }\n}", "\n    y();"),
    ("javascript", "describe('x', () => {\n  it('y', () => {‸\n  });\n});\n", "\n    expect(1).toBe(1);\n  });",
     "\n    expect(1).toBe(1);"),
    ("javascript", "function f(items) {\n  if (items.length) {‸}\n}\n", "\n    return 1;\n  }", "\n    return 1;\n  "),
    ("cpp", "namespace n {\nint f() {‸\n}\n}  // namespace n\n", "\n    return 1;\n}", "\n    return 1;"),
]


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
@pytest.mark.parametrize("language_id, source, completion, expected", REPEATED, ids=[c[0] for c in REPEATED])
def test_a_closer_the_suffix_has_is_still_cut(language_id, source, completion, expected, crlf):
    assert shown(language_id, source, completion, crlf) == expected


def test_strings_and_comments_over_lines_hold_no_brackets():
    lua = "local function f(xs)\n  local t = 0\n  for _, x in ipairs(xs) do‸\n  end\n  return t\nend\n"
    for body in ("\n    local s = [[\n    )\n    ]]\n    t = t + #s", "\n    --[[ a (\n    ]]\n    t = t + x"):
        assert shown_lf("lua", lua, body) == body
    c = "int f(int *xs, int n) {\n  int t = 0;\n  for (int i = 0; i < n; i++) {‸\n  }\n  return t;\n}\n"
    body = "\n    /* add (it)\n       here } */\n    t += xs[i];"
    assert shown_lf("c", c, body) == body
    js = "function f(items) {\n  if (items.length) {‸\n  }\n  return null;\n}\n"
    body = "\n    const s = `a\n${x})`;\n    return s;"
    assert shown_lf("javascript", js, body) == body


REPAIRS = [
    # (language, source, the model's text, what is shown)
    ("lua", "local t = {\n  a = 1,\n  ‸\n", "  b = 2,\n}", "b = 2,\n}"),
    ("javascript", "const o = {\n  a: 1,\n  ‸\n", "  b: 2,\n};", "b: 2,\n};"),
    ("go", "package p\n\nvar m = map[string]int{\n\t\"a\": 1,\n\t‸\n", "\t\"b\": 2,\n}", "\"b\": 2,\n}"),
    ("python", "x = [\n    1,\n    ‸\n", "    2,\n]", "2,\n]"),                # was cut to `2,`
    ("lua", "local t = {\n  a = 1,\n  ‸\n", "  b = 2,\n}}", None),              # still broken
]


@pytest.mark.parametrize("language_id, source, completion, expected", REPAIRS,
                         ids=[f"{c[0]}-{c[2]!r}" for c in REPAIRS])
def test_a_completion_that_closes_what_the_file_leaves_open_is_shown(language_id, source, completion, expected):
    assert Snapshot.parse(source.replace(CURSOR, ""), language_id).error_count() > 0   # the user is typing
    assert shown_lf(language_id, source, completion) == expected

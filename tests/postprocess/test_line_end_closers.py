"""At the end of a line (the rest of it blank), outside Python, a one-line completion must not close
a bracket that nothing leaves open, nor leave open a character literal it opens (docs/planner.md,
post-processing rule 5). The line being typed is already an error in the file, so the parse check,
which refuses only a completion that adds one, let a completion trade it for another
(`foo(a, b))`, `x := y}`, `c := 'a`: a probe typing Go, Lua, Java and JavaScript).

What is open comes from the tree for the lines above and below (a call opened lines above, a `}`
the file already has further down) and from the line's own text up to the cursor."""
import pytest

from dllm_lsp.planner.spans import PlannerSettings, plan_span
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"

GO_CALL = "package p\n\nfunc f() {\n\tx := foo(a, b, ‸\n}\n"
GO_CALL_OVER_LINES = "package p\n\nfunc f() {\n\tx := foo(\n\t\ta,\n\t\tb,‸\n}\n"
JAVA_CALL_OVER_LINES = "class A {\n  void f() {\n    foo(a,\n        b,‸\n  }\n}\n"
JS_IF_CLOSED = "function f() {\n  if (x) {\n    y();\n  }‸\n"
TS_ARRAY = "function f() {\n  const xs = [1, 2, ‸\n}\n"
RUST_VEC = "fn f() {\n    let v = vec![1, 2, ‸\n}\n"
C_CALL = "int f(void) {\n  return g(1, 2, ‸\n}\n"
LUA_CALL = "function f()\n  local t = g(a, b, ‸\nend\n"
LUA_TABLE_OVER_LINES = "local t = {\n  a = 1,\n  b = 2,‸\n"
JAVA_ARRAY = "class A {\n  void f() {\n    int[] a = {1, 2,‸\n  }\n}\n"

STRAY_CLOSERS = [
    # (language, source, the model's text): nothing is shown
    ("go", GO_CALL, "c))"),
    ("go", "package p\n\nfunc f() {\n\tx := y +‸\n}\n", " z}"),               # the function's `}` is below
    ("go", GO_CALL_OVER_LINES, "c))"),
    ("go", "package p\n\nfunc f() {\n\tx := foo(a,‸\n\t\tb)\n}\n", " c)"),   # the next line closes it
    ("java", JAVA_CALL_OVER_LINES, "c));"),
    ("java", JAVA_ARRAY, " 3}};"),
    ("javascript", JS_IF_CLOSED, "}}"),
    ("typescript", TS_ARRAY, "3]];"),
    ("typescript", TS_ARRAY, "3);"),                                            # the wrong closer
    ("rust", RUST_VEC, "3]];"),
    ("c", C_CALL, "3));"),
    ("lua", LUA_CALL, "c))"),
    ("lua", LUA_TABLE_OVER_LINES, " c = 3 }}"),
]

CLOSERS_THAT_CLOSE = [
    # (language, source, the model's text, what is shown)
    ("go", GO_CALL, "c)", "c)"),
    ("go", GO_CALL_OVER_LINES, "c)", "c)"),                 # opened two lines above
    ("java", JAVA_CALL_OVER_LINES, "c);", "c);"),
    ("java", JAVA_ARRAY, " 3};", " 3};"),
    ("javascript", JS_IF_CLOSED, "}", "}"),                 # the function's `{`, open above
    ("typescript", TS_ARRAY, "3];", "3];"),
    ("rust", RUST_VEC, "3];", "3];"),
    ("c", C_CALL, "3);", "3);"),
    ("lua", LUA_CALL, "c)", "c)"),
    ("lua", LUA_TABLE_OVER_LINES, " c = 3 }", " c = 3 }"),  # the table opened three lines above
    # closers in a comment, a string, a char literal or a macro's body close nothing
    ("go", "package p\n\nfunc f() {\n\tx := 1 ‸\n}\n", "// done)", "// done)"),
    ("javascript", "function f() {\n  const s = ‸\n}\n", "'a)';", "'a)';"),
    ("javascript", "function f() {\n  const s = ‸\n}\n", "`${a})`;", "`${a})`;"),
    ("rust", "fn f() {\n    let c = ‸\n}\n", "')';", "')';"),
    ("c", "/*\n  see foo(‸\n*/\n", "x))", "x))"),
    ("c", "#define END_NS ‸\n", "}", "}"),
]

CHAR_LITERALS = [
    # (language, source, the model's text, what is shown)
    ("go", "package p\n\nfunc f() {\n\tc := ‸\n}\n", "'a", None),
    ("go", "package p\n\nfunc f() {\n\tc := ‸\n}\n", "'a'", "'a'"),
    ("java", "class A {\n  void f() {\n    char c = ‸\n  }\n}\n", "'x", None),
    ("c", "int f(void) {\n  char c = ‸\n}\n", "'\\n", None),
    ("c", "int f(void) {\n  char c = ‸\n}\n", "'\\n';", "'\\n';"),
    ("cpp", "int f() {\n  auto c = ‸\n}\n", "u8'a", None),
    ("cpp", "int f() {\n  long n = ‸\n}\n", "1'000'000;", "1'000'000;"),   # digit separators
    ("rust", "fn f() {\n    let c = ‸\n}\n", "'x", None),
    ("rust", "fn f() {\n    let c = ‸\n}\n", "b'x", None),
    ("rust", "fn f() {\n    let c = ‸\n}\n", "'x';", "'x';"),
    # Rust's lifetimes and loop labels are not char literals
    ("rust", "fn f<'a>(x: &‸\n", "'a str) {", "'a str) {"),
    ("rust", "struct S<‸\n", "'a, T: 'a> {", "'a, T: 'a> {"),
    ("rust", "fn f() {\n    'outer: loop {\n        break ‸\n    }\n}\n", "'outer;", "'outer;"),
    # where `'` quotes a string, one left open at the line's end is the user's to go on typing
    ("javascript", "function f() {\n  const s = ‸\n}\n", "'abc", "'abc"),
    ("lua", "local s = ‸\n", "'abc", "'abc"),
]


def finished(language_id: str, source: str, completion: str) -> str | None:
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    plan = plan_span(Snapshot.parse(text, language_id), cursor, PlannerSettings(heal_whitespace=False))
    assert plan.single_line and not plan.line_rest.strip()
    return finish(plan, completion)


@pytest.mark.parametrize("language_id, source, completion", STRAY_CLOSERS,
                         ids=[f"{c[0]}-{c[2]!r}" for c in STRAY_CLOSERS])
def test_a_closer_that_closes_nothing_left_open_is_not_shown(language_id, source, completion):
    assert finished(language_id, source, completion) is None


@pytest.mark.parametrize("language_id, source, completion, expected", CLOSERS_THAT_CLOSE,
                         ids=[f"{c[0]}-{c[2]!r}" for c in CLOSERS_THAT_CLOSE])
def test_a_closer_of_what_is_open_is_shown(language_id, source, completion, expected):
    assert finished(language_id, source, completion) == expected


@pytest.mark.parametrize("language_id, source, completion, expected", CHAR_LITERALS,
                         ids=[f"{c[0]}-{c[2]!r}" for c in CHAR_LITERALS])
def test_a_char_literal_left_open_is_not_shown(language_id, source, completion, expected):
    assert finished(language_id, source, completion) == expected


def test_a_call_opened_far_above_in_a_long_file_still_counts():
    """The tree is read near the line only (and each enclosing node's first and last child):
    hundreds of functions above and below leave the call's `(`, opened lines above, open."""
    functions = "".join(f"func f{i}(a int) int {{\n\tif a > {i} {{\n\t\treturn g(a, {i})\n\t}}\n\treturn a\n}}\n\n"
                        for i in range(400))
    source = "package p\n\n" + functions + GO_CALL_OVER_LINES.removeprefix("package p\n\n") + "\n" + functions
    assert finished("go", source, "c)") == "c)"
    assert finished("go", source, "c))") is None

"""Mid-line, a one-line completion must not leave a bracket or a string open that the rest of the
line does not close (post-processing rule 5). The scan that reads the line must agree with the
language on what a `'` is, and must not read prose as code:

- a C / C++ digit separator (`1'000'000`) is no quote: read as one, `g(‸)` + `1'000` was refused,
  and after `1'000` on the line a completion that leaves a `(` open (`g(x`) was shown, its bracket
  swallowed by the "string" the separator opened. The line-end rule already had it right; both
  now ask one rule per language (postprocess._APOSTROPHE_RULES, from code_scan);
- a Rust char literal holds no bracket (`')'` was refused: its `)` was read as a stray closer);
- inside a comment, a string begun on a line above (a docstring's second line), a Lua long string
  or JSX text, a `'` is an apostrophe: `user's` was refused in all of them, Python's comments
  and docstrings included. What breaks out of them (`*/`, `\"\"\"`, `{name`) is still refused.

Real tree-sitter parses, plans and post-processing, as the server runs them."""
import pytest

from dllm_lsp.planner.spans import PlannerSettings, plan_span
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"

CASES = [
    # (language, source, the model's text, what is shown)
    # C / C++ digit separators
    ("cpp", "int f() { return g(‸); }\n", "1'000", "1'000"),
    ("cpp", "int f() { return g(‸); }\n", "1'000'000", "1'000'000"),
    ("cpp", "int f() { return g(‸); }\n", "0xFF'FF", "0xFF'FF"),
    ("cpp", "int f() { long n = 1'000 + ‸; }\n", "g(x", None),          # the `(` is left open
    ("cpp", "int f() { long n = 1'000 + ‸; }\n", "g(x)", "g(x)"),
    ("cpp", "int f() { return g(‸); }\n", "u8'a", None),                 # a char literal left open
    ("c", "int f(void) { return g(‸); }\n", "'a", None),
    # Rust: a char literal's bracket is no bracket; a lifetime is no quote; an open char is one
    ("rust", "fn f() {\n    let close = ‸;\n}\n", "')'", "')'"),
    ("rust", "fn f(s: &str) -> &str { s.trim_matches(‸) }\n", "'('", "'('"),
    ("rust", "fn f(c: char) {\n    if c == ‸ {}\n}\n", "')' || c == '('", "')' || c == '('"),
    ("rust", "fn f() {\n    let c = g(‸);\n}\n", "'x", None),
    ("rust", "fn f() {\n    if self.‸}\n", "ready", "ready"),
    # comments: an apostrophe is no quote; closing a block comment early is still refused
    ("python", "def f():\n    x = 1  # the ‸ value\n    return x\n", "user's", "user's"),
    ("python", "def f():\n    x = 1  # the ‸ value\n    return x\n", "first (smallest", "first (smallest"),
    ("javascript", "function f() {\n  // TODO: fix the ‸ bug\n  return 1;\n}\n", "user's", "user's"),
    ("javascript", "function f() {\n  /* the ‸ bug */\n  return 1;\n}\n", "user's", "user's"),
    ("javascript", "function f() {\n  /* the ‸ bug */\n  return 1;\n}\n", "x */ foo(", None),
    ("c", "int f(void) {\n  // the ‸ case\n  return 0;\n}\n", "user's", "user's"),
    ("c", "int f(void) {\n  /* the ‸ bug */\n  return 0;\n}\n", "x */ char c = '", None),
    ("lua", "local function f()\n  -- the ‸ case\n  return 0\nend\n", "user's", "user's"),
    ("rust", "fn f() {\n    /* a\n the ‸ line */\n}\n", "user's", "user's"),
    # strings begun on a line above, or not by a lone quote
    ("python", 'def f():\n    """Return the value.\n\n    The ‸ one.\n    """\n    return 1\n', "user's", "user's"),
    ("python", 'def f():\n    """Return the value.\n\n    The ‸ one.\n    """\n    return 1\n', 'x""" + (', None),
    ("python", 'def f():\n    """Return the ‸ value."""\n    return 1\n', "user's", "user's"),
    ("lua", "local s = [[long ‸]]\n", "it's", "it's"),
    ("go", "package p\n\nfunc f() {\n\ts := `line one\nthe ‸ line`\n\t_ = s\n}\n", "x` + (", None),
    ("javascript", 'function f() {\n  const s = "a ‸ b";\n}\n', "it's", "it's"),     # a string of the line
    ("javascript", "function f() {\n  const s = 'a ‸ b';\n}\n", "it's", None),       # that it closes
    # a string of the line is read from its quote on, in a line still being typed too
    ("python", 'def f():\n    foo("a ‸ b", \n', 'x", (', None),
    ("go", 'package p\n\nfunc f() {\n\tfoo("a ‸ b", \n}\n', 'x", (', None),
    ("go", 'package p\n\nfunc f() {\n\tfoo("a ‸ b", \n}\n', "x", "x"),
    # JSX text
    ("typescriptreact", "export const A = () => <p>Hello ‸ world</p>;\n", "user's", "user's"),
    ("javascript", "export const A = () => <p>Hello ‸ world</p>;\n", "user's", "user's"),
    ("typescriptreact", "export const A = () => (\n  <li key={x.id}>‸</li>\n);\n", "it's {x.name}", "it's {x.name}"),
    ("typescriptreact", "export const A = () => <p>Hello ‸ world</p>;\n", "{name", None),
    ("typescriptreact", "export const A = () => <p>Hello ‸ world</p>;\n", "{'a}", None),
    ("typescriptreact", "export const A = () => <p>Hello ‸ world</p>;\n", "{f(a)}", "{f(a)}"),
]


@pytest.mark.parametrize("language_id, source, completion, expected", CASES,
                         ids=[f"{c[0]}-{c[2]!r}-{n}" for n, c in enumerate(CASES)])
def test_what_a_quote_is_mid_line(language_id, source, completion, expected):
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    snapshot = Snapshot.parse(text, language_id)
    assert snapshot.tree is not None
    plan = plan_span(snapshot, cursor, PlannerSettings(heal_whitespace=False))
    assert plan.single_line and plan.line_rest.strip()   # mid-line: rule 5's bracket scan
    assert finish(plan, completion) == expected


@pytest.mark.parametrize("source, right, wrong", [
    ("int f() {\n  long n = ‸\n}\n", "1'000 + h(2);", "1'000 + h(2));"),     # the line-end rule
    ("int f() {\n  long n = g(‸);\n}\n", "1'000 + h(2)", "1'000 + h(2"),       # the mid-line scan
])
def test_both_rules_read_digit_separators_alike(source, right, wrong):
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    plan = plan_span(Snapshot.parse(text, "cpp"), cursor, PlannerSettings(heal_whitespace=False))
    assert finish(plan, right) == right
    assert finish(plan, wrong) is None

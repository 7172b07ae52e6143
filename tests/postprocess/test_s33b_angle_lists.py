"""A completion inside a type argument or parameter list that the rest of the line closes
(`new Map<‸>();`) often writes that list's end itself: `string, number>()`. `<` / `>` are no
brackets to the other rules (they are comparisons as often), the overlap `>()` is a partial match of
the line's `>();` (never trimmed), and the file already has an error there, so
`new Map<string, number>()>();` was shown. The tree says whether the cursor is in such a list; the
completion's own `>` closing it is cut where the line already has what follows, and the completion
refused where it goes on otherwise. A comparison (`a <‸ b`) is no list and is left alone.

Real tree-sitter parses, plans and post-processing; the model's text is written by hand."""
import pytest

from dllm_lsp.planner.spans import plan_span
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"


def shown_file(language_id: str, source: str, completion: str) -> str | None:
    """The file as the editor has it once the completion is inserted, or None (nothing shown)."""
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    plan = plan_span(Snapshot.parse(text, language_id), cursor)
    assert plan.single_line
    shown = finish(plan, completion)
    return None if shown is None else text[:plan.replace_start] + shown + text[plan.replace_end:]


TS_MAP = "const m = new Map<‸>();\n"
TRIMMED = [
    # (language, source, the model's text, the file shown)
    ("typescript", TS_MAP, "string, number>()", "const m = new Map<string, number>();\n"),
    ("typescript", TS_MAP, "string, number>();", "const m = new Map<string, number>();\n"),
    ("typescript", TS_MAP, "string, number>", "const m = new Map<string, number>();\n"),
    ("typescript", TS_MAP, "string, (a: number) => void>()",          # an arrow's `>` is no closer
     "const m = new Map<string, (a: number) => void>();\n"),
    ("typescript", TS_MAP, "string, Array<number>>()",                # its own `<` closes its own `>`
     "const m = new Map<string, Array<number>>();\n"),
    ("tsx", TS_MAP, "string, number>()", "const m = new Map<string, number>();\n"),
    ("typescript", "const m = new Map<str‸>();\n", "string, number>()",   # a word typed halfway
     "const m = new Map<string, number>();\n"),
    ("typescript", "const m = new Map<string, Array<‸>>();\n", "number>>()",
     "const m = new Map<string, Array<number>>();\n"),
    ("typescript", "let xs: Array<‸> = [];\n", "string> = []", "let xs: Array<string> = [];\n"),
    ("java", "class A {\n  void f() {\n    var m = new HashMap<‸>();\n  }\n}\n", "String, Integer>()",
     "class A {\n  void f() {\n    var m = new HashMap<String, Integer>();\n  }\n}\n"),
    ("cpp", "int main() {\n    auto p = std::make_unique<‸>();\n}\n", "Foo>()",
     "int main() {\n    auto p = std::make_unique<Foo>();\n}\n"),
    ("cpp", "std::vector<std::vector<‸>> v;\n", "int>> v;", "std::vector<std::vector<int>> v;\n"),
    ("rust", "fn f() {\n    let v = Vec::<‸>::new();\n}\n", "i32>::new()",
     "fn f() {\n    let v = Vec::<i32>::new();\n}\n"),
    ("rust", "fn f() {\n    let v: Vec<‸> = Vec::new();\n}\n", "&'a str> = Vec::new()",   # a lifetime, no quote
     "fn f() {\n    let v: Vec<&'a str> = Vec::new();\n}\n"),
    ("rust", "fn f<‸>() {}\n", "T: Clone>()", "fn f<T: Clone>() {}\n"),
]


@pytest.mark.parametrize("language_id, source, completion, expected", TRIMMED,
                         ids=[f"{c[0]}-{c[2]!r}" for c in TRIMMED])
def test_the_lists_end_the_line_has_is_not_written_twice(language_id, source, completion, expected):
    assert shown_file(language_id, source, completion) == expected


REFUSED = [
    # The completion closes the list and goes on with something else than the line's rest: the
    # line's own `>` would then close nothing.
    ("typescript", TS_MAP, "string>() // a map"),
    ("typescript", TS_MAP, "string, number>(); m.set(1)"),
    ("cpp", "int main() {\n    auto p = std::make_unique<‸>();\n}\n", "Foo>(1, 2)"),
]


@pytest.mark.parametrize("language_id, source, completion", REFUSED, ids=[f"{c[0]}-{c[2]!r}" for c in REFUSED])
def test_a_list_closed_twice_is_not_shown(language_id, source, completion):
    assert shown_file(language_id, source, completion) is None


UNCHANGED = [
    # Comparisons with a `>` later on the line. TypeScript's grammar reads the broken
    # `a < && b > 0` as a list (`a<&&b>`): only a list whose `>` follows the cursor is judged.
    ("typescript", "function f(a: number, b: number) {\n  return a <‸ && b > 0;\n}\n", " 1 || c > 2",
     "function f(a: number, b: number) {\n  return a < 1 || c > 2 && b > 0;\n}\n"),
    ("typescript", "function f(a: number, b: number) {\n  if (a <‸ && b > 0) return 1;\n}\n", " 1",
     "function f(a: number, b: number) {\n  if (a < 1 && b > 0) return 1;\n}\n"),
    ("cpp", "int f(int a, int b) {\n    return a <‸ && b > 0;\n}\n", " 1 || c > 2",
     "int f(int a, int b) {\n    return a < 1 || c > 2 && b > 0;\n}\n"),
    ("rust", "fn f(a: i32, b: i32) -> bool {\n    a <‸ && b > 0\n}\n", " 1 || c > 2",
     "fn f(a: i32, b: i32) -> bool {\n    a < 1 || c > 2 && b > 0\n}\n"),
    ("java", "class A {\n  boolean f(int a, int b) {\n    return a <‸ && b > 0;\n  }\n}\n", " 1 || c > 2",
     "class A {\n  boolean f(int a, int b) {\n    return a < 1 || c > 2 && b > 0;\n  }\n}\n"),
    # A list the completion stays inside
    ("typescript", TS_MAP, "string, number", "const m = new Map<string, number>();\n"),
    ("rust", "fn f() {\n    let v = Vec::<‸>::new();\n}\n", "i32", "fn f() {\n    let v = Vec::<i32>::new();\n}\n"),
]


@pytest.mark.parametrize("language_id, source, completion, expected", UNCHANGED,
                         ids=[f"{c[0]}-{c[2]!r}" for c in UNCHANGED])
def test_comparisons_and_completions_inside_the_list_are_left_alone(language_id, source, completion, expected):
    assert shown_file(language_id, source, completion) == expected

"""Post-processing never makes a completion worse than the document it lands in: texts the shipped
model wrote (or a right answer it could write) at spots where the region check, the trimming or
the word rules let a broken line through."""
import pytest

from dllm_lsp.planner.spans import PlannerSettings, plan_span
from dllm_lsp.postprocess import finish, trim_line_overlap
from dllm_lsp.syntax.snapshot import Snapshot, parse_errors


def finished(src: str, language: str, raw: str) -> tuple[str, str | None]:
    """(document text, the text post-processing shows for `raw` at the ‸ of `src`)."""
    offset, text = src.index("‸"), src.replace("‸", "")
    return text, finish(plan_span(Snapshot.parse(text, language), offset, PlannerSettings()), raw)


RUST = "fn area(w: u32, h: u32) -> u32 {\n    w * h\n}\n‸\nfn main() {\n    println!(\"{}\", area(2, 3));\n}\n"
GO = ('package main\n\nimport "net"\n\nfunc connect(err error) bool {\n'
      '\tif e, ok := err.(‸*net.OpError); ok {\n\t\treturn e != nil\n\t}\n\treturn false\n}\n')
METHODS = "".join(f"\tmethod{i}(value: number): number {{\n\t\tconst doubled = value * 2;\n\t\treturn doubled + {i};\n\t}}\n\n"
                  for i in range(40))
LONG_CLASS = "import { EventEmitter } from 'events';\n\nexport class Agent extends EventEmitter {‸\n" + METHODS + "}\n"


@pytest.mark.parametrize("src, language, raw", [
    (RUST, "rust", "    }\n"),            # the region was the lone `}` above, an error by itself
    (GO, "go", ")"),                      # a Go statement reparsed without its line break
    (LONG_CLASS, "typescript", ")"),      # a class over 3 kB: its header line with the line above
    ("int f(void) {\n    return 1;\n}\n‸\nint main(void) {\n    return f();\n}\n", "c", '    } = "'),
])
def test_a_completion_that_breaks_a_file_that_parses_is_not_shown(src, language, raw):
    text, shown = finished(src, language, raw)
    assert parse_errors(language, text) == 0
    assert shown is None, shown


def test_where_the_region_stands_alone_a_good_completion_still_shows():
    text, shown = finished(RUST, "rust", "fn perimeter(w: u32, h: u32) -> u32 { 2 * (w + h) }\n")
    assert shown == "fn perimeter(w: u32, h: u32) -> u32 { 2 * (w + h) }"


def test_a_cut_before_the_lines_comma_never_lands_inside_the_completions_own_call():
    assert trim_line_overlap("max(width, height)", ",") == "max(width, height)"
    assert trim_line_overlap("x):", "):") == "x"                  # closers the line has stay trimmed
    text, shown = finished('area = {\n    "side": ‸,\n}\n', "python", "max(width, height)")
    assert shown == "max(width, height)"


def test_brackets_inside_the_completions_strings_are_not_its_own():
    # the `(` in the string opens nothing: the `)` the line has is the one the model repeated
    assert trim_line_overlap('"(", end)', ")") == '"(", end'
    text, shown = finished('print(‸)\n', "python", '"(", end="")')
    assert shown == '"(", end=""'
    # a closer inside the completion's string is no place to cut (`")"` before `)`)
    assert trim_line_overlap('")" + x)', ")") == '")" + x'


@pytest.mark.parametrize("src, language, raw", [
    ('result = {\n    "sum": sum(values),\n    "range": ‸,\n}\n', "python", ' "'),
    ('const config = {\n  name: "demo",\n  size: ‸,\n  path: process.cwd(),\n};\n', "javascript", " {"),
    ("total = compute(‸)\n", "python", "bar(x"),
])
def test_mid_line_a_completion_may_not_leave_a_bracket_or_string_open(src, language, raw):
    assert finished(src, language, raw)[1] is None


def test_mid_line_balanced_completions_and_rust_lifetimes_show():
    assert finished("total = compute(‸)\n", "python", "bar(x), 2")[1] == "bar(x), 2"
    shown = finished("fn f‸(x: &str) {}\n", "rust", "<'a>")[1]
    assert shown is None or "'a" in shown          # not refused for its "open quote"


@pytest.mark.parametrize("src, raw", [
    ("import os\npath = os.getc‸wd()\n", "getclass_name"),     # glued: os.getclass_namewd()
    ("import os\npath = os.getc‸wd()\n", "getcwd()."),
    ("values = [1]\nn = len(val‸ues)\n", "value,"),            # len(value,ues)
    ("x = ‸value\n", "foo"),                                    # foovalue
])
def test_nothing_is_glued_onto_the_word_after_the_cursor(src, raw):
    assert finished(src, "python", raw)[1] is None


def test_before_a_word_a_completion_that_ends_apart_from_it_shows():
    assert finished("value = 2\nx = ‸value\n", "python", "3 * ")[1] == "3 *"


@pytest.mark.parametrize("language", ["c", "javascript", "java"])
def test_a_tab_typed_in_a_file_with_no_indented_line_indents_every_body_line(language):
    header = {"c": "int main(void) {", "javascript": "function main() {", "java": "class A {"}[language]
    src = f"{header}\n\t‸\n}}\n"
    body_text = "const x = 1;\nconst y = 2;" if language == "javascript" else "int x = 1;\nint y = 2;"
    text, shown = finished(src, language, body_text)
    cursor = src.index("‸")
    body = (text[:cursor] + shown + text[cursor:]).split("\n")[1:3]
    assert [line[:1] for line in body] == ["\t", "\t"] and "    " not in shown, repr(shown)


BELOW_ZERO = ("def below_zero(operations):\n    balance = 0\n    for op in operations:\n        balance += op\n"
              "        ‸\n            return True\n    return False\n")
UNCLOSED = "def f():\n    d = {\n        'a': 1,\n        'b': 2,\n    ‸\n    return d\n"


@pytest.mark.parametrize("src, raw, shown", [
    # The line to write is a block header (the next line is indented deeper): a statement there
    # leaves the file's own IndentationError where it was, and was shown (89 of 616 shown single
    # lines of the shipped model then failed with IndentationError); the header fixes it.
    (BELOW_ZERO, "        return 1", None),
    (BELOW_ZERO, "        if balance < 0:", "if balance < 0:"),
    # The file's own error is a `{` never closed, reported at the opener above: a completion that
    # opens a string of its own fails later, on its own line, and was shown for that.
    (UNCLOSED, '    "', None),
    (UNCLOSED, "    ':", None),
    (UNCLOSED, "    }", "}"),
    # `return False` inside the `if` is not the function's `return False` after it: it was cut as
    # a rewrite of the next line, and the right answer showed nothing.
    ("def f(x):\n    if x:\n        ‸\n    return False\n", "        return False", "return False"),
])
def test_python_lines_the_file_still_fails_on_are_not_shown_and_right_ones_are(src, raw, shown):
    assert finished(src, "python", raw)[1] == shown

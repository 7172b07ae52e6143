"""The line helpers every language falls back to."""
from collections import Counter

import pytest

from dllm_lsp.planner.lines import block_steps, detect_indent_unit, line_break_near, usual_step
from dllm_lsp.planner.spans import plan_span
from dllm_lsp.syntax.snapshot import Snapshot


@pytest.mark.parametrize("text, expected", [
    ("a = 1\nb = \n", "\n"),
    ("a = 1\r\nb = \r\n", "\r\n"),
    ("a = 1\rb = \r", "\r"),      # classic Mac: lines inserted here end in CR, not LF
    ("b = ", "\n"),               # one line: no break to copy
    ("a = 1\r\nb = ", "\r\n"),    # the last line has none: that of the line before
])
def test_text_the_server_inserts_uses_the_line_break_near_it(text, expected):
    assert line_break_near(text, text.index("b = ") + 4) == expected


# -- the indentation unit: the step a block adds to its header, not the smallest indentation ----

@pytest.mark.parametrize("text, expected", [
    # a method's body: the only lines near sit at 8 and 12 columns (the smallest read 8)
    ("        if a:\n            b()\n        for x in y:\n            z()\n        ", "    "),
    # a class with one method: one line at 4, several at 8 (the smallest common read 8)
    ("class A:\n    def f(self):\n        if a:\n            b()\n        return 1\n", "    "),
    # a 2-space file seen inside a function (4 and 6 columns)
    ("    if a:\n      b()\n    if c:\n      d()\n    ", "  "),
    # continuation lines aligned to an open parenthesis (6 columns) in a 2-space file
    ("print(alpha,\n      beta,\n      gamma)\nif x:\n  y()\n", "  "),
    # a brace language, its body 2 deeper than the `{` line, seen from inside a nested block
    ("    if (a) {\n      b();\n    }\n    while (c) {\n      d();\n    }\n", "  "),
    ("\tif a:\n\t\tb()\n\tif c:\n\t\td()\n", "\t"),       # tabs
    ("x = 1\ny = 2\n", "    "),                                   # no indentation: the default
    ("x = 1\n  y = 2\n  z = 3\n", "  "),                           # no block header: the smallest common
])
def test_the_indent_unit_is_the_step_from_a_header_to_its_body(text, expected):
    assert detect_indent_unit(text, len(text), "    ") == expected


def test_the_planner_and_post_processing_read_one_step():
    text = "class A:\n    def f(self):\n        if a:\n            b()\n        if c:\n"
    steps = block_steps(text, len(text))
    assert steps == {4: 3} and usual_step(steps) == 4
    plan = plan_span(Snapshot.parse(text, "python"), len(text) - 1)
    assert plan.kind == "block_body" and plan.indent_unit == "    " and plan.indent == " " * 12


def test_a_tie_goes_to_the_preferred_step_else_the_smallest():
    assert usual_step(Counter({2: 2, 4: 2})) == 2
    assert usual_step(Counter({2: 2, 4: 2}), prefer=4) == 4
    assert usual_step(Counter({2: 1, 4: 2}), prefer=2) == 4

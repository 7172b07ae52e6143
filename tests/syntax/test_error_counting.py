"""Error counting sees every ERROR and MISSING node, hidden MISSING tokens included (issue 14:
a completion that glued `(x)` in front of `return` passed the parse check)."""
from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from dllm_lsp.planner.spans import plan_span
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax import Snapshot, count_errors
from dllm_lsp.syntax.snapshot import parse_errors

NESTED = '''def wrap(text, prefix):
    def lines():
        for line in text.splitlines(True):
            yield prefix + line
    return "".join(lines())
'''


def test_a_hidden_missing_newline_counts_as_an_error():
    glued = NESTED.replace('    return', '    (x)return')
    snapshot = Snapshot.parse(glued, "python")
    # tree-sitter recovers with a MISSING `_newline`, a hidden token no node lists as a child
    assert "MISSING" in str(snapshot.root)
    assert not any(c.is_missing for c in snapshot.root.children)
    assert count_errors(snapshot.root) >= 1
    assert snapshot.error_count() >= 1
    assert parse_errors("python", glued) >= 1
    assert Snapshot.parse(NESTED, "python").error_count() == 0


def test_visible_errors_are_still_counted_once_each():
    assert parse_errors("python", "x = (1,\n") >= 1
    assert parse_errors("python", "def f(:\n    pass\n") >= 1
    assert parse_errors("python", "x = 1\n") == 0


def test_a_completion_glued_to_the_next_statement_is_dropped():
    cursor = NESTED.index("return")
    plan = plan_span(Snapshot.parse(NESTED, "python"), cursor)
    assert plan.kind == "line_tail"
    assert finish(plan, "(x)") is None


TEXTWRAP = Path(sysconfig.get_paths()["stdlib"]) / "textwrap.py"


@pytest.mark.skipif(not TEXTWRAP.is_file(), reason="needs the interpreter's textwrap.py")
def test_the_reported_textwrap_case():
    """Issue 14: line 485, column 5 of Python 3.11's textwrap.py, completion `(x)`."""
    text = TEXTWRAP.read_text(encoding="utf-8")
    lines = text.split("\n")
    row = next((i for i, line in enumerate(lines) if line == "    return ''.join(prefixed_lines())"), None)
    if row is None:
        pytest.skip("this textwrap.py has no `return ''.join(prefixed_lines())` line")
    cursor = sum(len(line) + 1 for line in lines[:row]) + 4
    plan = plan_span(Snapshot.parse(text, "python"), cursor)
    assert finish(plan, "(x)") is None

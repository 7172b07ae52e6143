"""Token healing: the blanks typed before the span go to the model, and come back out of its text.

The planner ends the request's prefix before them (planner/spans.healed_blanks); post-processing
reads the model's text from the cursor on again (postprocess.unheal) and then finishes it as any
other completion. Real planner, real tree-sitter, real post-processing.
"""
from __future__ import annotations

import pytest

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import StepState
from dllm_lsp.loader import load_model
from dllm_lsp.options import Options
from dllm_lsp.pipeline import plan
from dllm_lsp.planner.spans import PlannerSettings, plan_span
from dllm_lsp.postprocess import finish, unheal
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"


def planned(language_id: str, source: str, heal: bool = True):
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    return plan_span(Snapshot.parse(text, language_id), cursor, PlannerSettings(heal_whitespace=heal))


# (languageId, source, kind, healed): what the planner leaves to the model
HEALED = [
    ("python", "def f(x):\n    y = x\n    ‸\n", "line", "    "),               # Enter's indentation
    ("python", "def f(x):\n    ‸\n", "block_body", "    "),
    ("python", "x = ‸\n", "line_tail", " "),
    ("python", "def f(x):\n    y = x\n    ret‸\n", "identifier", "    "),    # the blanks before the word
    ("python", "print(a, ‸)\n", "line_tail", " "),
    ("python", "x = 1‸\n", "line_tail", ""),
    ("python", "def f(x): ‸\n", "block_body", ""),          # a header's trailing blank: the body is on the next line
    ("python", "‸\n", "line", ""),
    ("go", "func f() {\n\t‸\n}\n", "block_body", "\t"),
    ("javascript", "foo(a,\t‸);\n", "line_tail", "\t"),
    ("python", "f( ‸)\n", "arguments", " "),
]


@pytest.mark.parametrize("language_id, source, kind, healed", HEALED, ids=[repr(c[1]) for c in HEALED])
def test_the_planner_leaves_the_typed_blanks_to_the_model(language_id, source, kind, healed):
    span = planned(language_id, source)
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    assert (span.kind, span.healed) == (kind, healed)
    assert span.request.prefix + healed + span.typed_prefix == text[:cursor]
    assert (span.replace_start, span.replace_end) == (cursor - len(span.typed_prefix), cursor)
    unhealed = planned(language_id, source, heal=False)
    assert unhealed.healed == "" and unhealed.request.prefix + unhealed.typed_prefix == text[:cursor]


# (source, the model's text from the line start or the blanks on, what unheal gives, what is shown)
PYTHON_BLANK_LINE = "def f(x):\n    y = x + 1\n    ‸\n"
UNHEAL = [
    (PYTHON_BLANK_LINE, "    return y", "return y", "return y"),
    (PYTHON_BLANK_LINE, "return y", "return y", "return y"),                 # no blanks written
    (PYTHON_BLANK_LINE, "  z = y\n  return z", "z = y\n    return z", "z = y\n    return z"),   # shallower: re-based
    (PYTHON_BLANK_LINE, "    if y:\n        return y", "if y:\n        return y", "if y:\n        return y"),
    (PYTHON_BLANK_LINE, "        return y", "    return y", None),           # deeper: an indentation error
    (PYTHON_BLANK_LINE, "\n    return y", "\n    return y", "\n    return y"),   # this line left blank
    # (`foo` is defined: a call of a name nothing defines is not shown, test_python_lines.py)
    ("def foo(n):\n    return n\nx = ‸\n", " foo(1)", "foo(1)", "foo(1)"),
    ("def foo(n):\n    return n\nx = ‸\n", "foo(1)", "foo(1)", "foo(1)"),
    ("def foo(n):\n    return n\nx = ‸\n", "   foo(1)\nbar", "foo(1)\nbar", "foo(1)"),
    ("def f(x):\n    y = x\n    ret‸\n", "    return y", "return y", "return y"),
    ("def f(x):\n    y = x\n    ret‸\n", "    raise y", "raise y", None),   # does not continue `ret`
]


@pytest.mark.parametrize("source, model_text, read, shown", UNHEAL, ids=[repr(c[1]) for c in UNHEAL])
def test_the_model_text_is_read_from_the_cursor_on(source, model_text, read, shown):
    span = planned("python", source)
    assert unheal(span, model_text) == read
    assert finish(span, model_text) == shown


def test_tabs_and_spaces_rebase_by_width():
    span = planned("go", "func f() {\n\tx := 1\n\t‸\n}\n")
    assert span.healed == "\t"
    assert unheal(span, "\tif x > 0 {\n\t\tx++\n\t}") == "if x > 0 {\n\t\tx++\n\t}"
    assert unheal(span, "    return x") == "return x"              # four spaces: the tab's width
    assert unheal(span, "if x {\n\tx++\n}") == "if x {\n\t\tx++\n\t}"   # shallower: moved one tab in


def test_a_plan_without_healing_reads_the_text_as_it_is():
    span = planned("python", PYTHON_BLANK_LINE, heal=False)
    assert unheal(span, "    return y") == "    return y"


def test_streamed_states_and_the_no_completion_reason_read_from_the_cursor(tmp_path):
    folder = write_tiny_model(tmp_path / "tiny")
    engine = Engine(load_model(str(folder), "cpu"))
    text = PYTHON_BLANK_LINE.replace(CURSOR, "")
    completion_plan = plan(Snapshot.parse(text, "python"), PYTHON_BLANK_LINE.index(CURSOR),
                           Options().merged({"companionEdits": False}))
    assert completion_plan.span.healed == "    "
    state = StepState(2, 8, [["    retu"], ["  x"]], 0.5, 3)
    assert completion_plan.step_state(state).slot_texts == [["retu"], ["x"]]
    result = completion_plan.run(engine)
    assert completion_plan.model_text(result) == unheal(completion_plan.span, result.text)

"""Python fills that tree-sitter accepts but CPython refuses, and the indentation of nested fills
(slot texts given directly to `settle`, no model)."""
from __future__ import annotations

import ast
import time

import pytest

from dllm_lsp.multisite.holes import find_holes
from dllm_lsp.multisite.sites import WHOLE_FILE_COMPILE_CHARS, apply_outcomes, settle
from dllm_lsp.syntax.snapshot import Snapshot


def fill_one(text: str, slot_text: str):
    snapshot = Snapshot.parse(text, "python")
    holes = find_holes(snapshot, 0, len(text)).holes
    assert len(holes) == 1, holes
    (outcome,) = settle(text, "python", holes, [slot_text], snapshot.tree)
    return outcome, apply_outcomes(text, [outcome])


def valid_python(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


FILE = (
    "def check(files):\n"
    "    pass\n"
    "    files.require('a')\n"
    "\n"
    "\n"
    "def other(x):\n"
    "    return x\n"
)
TODO_FILE = FILE.replace("    pass\n", "    return 1\n").replace("    return x\n", "    # TODO: finish this\n    return x\n")


@pytest.mark.parametrize("hole, slot_text", [
    ("pass", "return False."),                       # tree-sitter: `False.files.require(...)`, no error
    ("# TODO: finish this", "if isinstance_str(\n    ):"),   # a header with an empty block
    ("pass", "x = 1\n        y = 2"),                # an unexpected indent
])
def test_a_fill_cpython_refuses_is_kept_though_tree_sitter_accepts_it(hole, slot_text):
    """The shipped model's fills left `return False.` and `if ...:` with no body (repro_4): the
    tree-sitter checks passed, the file no longer compiled."""
    text = FILE if hole == "pass" else TODO_FILE
    outcome, _ = fill_one(text, slot_text)
    raw = text.replace(hole, slot_text.replace("\n", "\n    "), 1)
    assert Snapshot.parse(raw, "python").error_count() == 0 and not valid_python(raw)   # what the check is for
    assert outcome.source == "kept" and "compile" in outcome.reason


def test_a_good_python_fill_is_still_taken():
    outcome, filled = fill_one(FILE, "if not files:\n        return False")
    assert outcome.source == "model" and valid_python(filled)


def test_a_file_that_did_not_compile_before_is_left_to_the_tree_sitter_checks():
    text = FILE + "print 'py2'\n"        # CPython refuses it already: there is nothing to keep
    assert not valid_python(text) and Snapshot.parse(text, "python").error_count() == 0
    outcome, _ = fill_one(text, "return False.")
    assert outcome.source == "model"


def test_a_large_file_is_compiled_around_the_fill_only():
    """Above WHOLE_FILE_COMPILE_CHARS only the top-level statements around the site are compiled:
    the check still refuses a broken fill at the end of a large file, in far less time than
    compiling the file would take for every site."""
    filler = "".join(f"def f{i}(a, b):\n    return a + b * {i}\n\n\n" for i in range(4000))
    text = filler + FILE
    assert len(text) > WHOLE_FILE_COMPILE_CHARS
    started = time.perf_counter()
    outcome, _ = fill_one(text, "return False.")
    assert outcome.source == "kept" and "compile" in outcome.reason
    outcome, filled = fill_one(text, "return bool(files)")
    assert outcome.source == "model" and valid_python(filled)
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("unit", ["\t", "    ", "  "])
def test_a_nested_fill_keeps_its_nesting_in_the_files_indent_unit(unit):
    """A model that nests with 4 spaces, in files indented with tabs, 4 or 2 spaces: every later
    line was forced to the hole's indent, so in a tab-indented file the loop's body landed on the
    loop's level (IndentationError in CPython, no tree-sitter error: repro_4b)."""
    text = f"def total(xs):\n{unit}result = 0\n{unit}pass\n{unit}return result\n"
    slot_text = "    for x in xs:\n        if x:\n            result += x\n    result *= 2"   # healWhitespace: blanks first
    outcome, filled = fill_one(text, slot_text)
    assert outcome.source == "model"
    assert filled == (f"def total(xs):\n{unit}result = 0\n{unit}for x in xs:\n{unit * 2}if x:\n"
                      f"{unit * 3}result += x\n{unit}result *= 2\n{unit}return result\n")
    assert valid_python(filled)


def test_a_fill_without_its_first_blanks_is_nested_from_the_holes_indent():
    text = "class A:\n    def f(self, xs):\n        pass\n"
    outcome, filled = fill_one(text, "for x in xs:\n            print(x)\n        return xs")
    assert outcome.source == "model"
    assert filled == "class A:\n    def f(self, xs):\n        for x in xs:\n            print(x)\n        return xs\n"

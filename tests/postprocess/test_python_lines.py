"""What post-processing shows for Python lines at the cursor, read against the file they land in:
a continuation clause judged with the statement it continues, a body indented by the file's own
step, and lines that read a name nothing defines. Real planner, tree-sitter and CPython parser;
the raw texts are what the shipped model (or a right answer) writes there."""
import ast
import sysconfig
from pathlib import Path

import pytest

from dllm_lsp.planner.spans import PlannerSettings, plan_span
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax.snapshot import Snapshot


def finished(src: str, raw: str) -> tuple[str, str | None]:
    """(document text, the text post-processing shows for `raw` at the ‸ of `src`)."""
    offset, text = src.index("‸"), src.replace("‸", "")
    return text, finish(plan_span(Snapshot.parse(text, "python"), offset, PlannerSettings()), raw)


def applied(src: str, raw: str) -> str | None:
    """The file with what is shown for `raw` inserted at the ‸ (None: nothing shown)."""
    offset, text = src.index("‸"), src.replace("‸", "")
    span = plan_span(Snapshot.parse(text, "python"), offset, PlannerSettings())
    shown = finish(span, raw)
    return None if shown is None else text[:span.replace_start] + shown + text[span.replace_end:]


# --- continuation clauses ----------------------------------------------------------------------------

# HumanEval/95: the `elif` goes after an inner if/elif/else that is the smallest statement around
# the cursor; its own `if` is 8 lines up. The region check read the clause without it.
CHAIN = '''def check(keys):
    state = "start"
    for key in keys:
        if state == "start":
            if key.isupper():
                state = "upper"
            elif key.islower():
                state = "lower"
            else:
                break
        ‸
                state = "mixed"
                break
        else:
            break
    return state
'''
ELIF = '        elif (state == "upper" and not key.isupper()) or (state == "lower" and not key.islower()):'

# MultiLineInfilling/HumanEval/9/L6_L11: a clause and its body at the end of a block
RUNNING = '''def rolling_max(numbers):
    running_max = None
    result = []
    for n in numbers:
        if running_max is None:
            running_max = n
        ‸
'''
TRY = '''def parse(items):
    out = []
    for item in items:
        try:
            value = int(item)
            out.append(value)
        ‸
    return out
'''


@pytest.mark.parametrize("src, raw", [
    (CHAIN, ELIF),
    (RUNNING, "        else:\n            running_max = max(running_max, n)\n\n        result.append(running_max)\n\n"
              "    return result"),
    (RUNNING, "        elif n > running_max:\n            running_max = n"),
    (TRY, "        except ValueError:\n            pass"),
    (TRY, "        finally:\n            out.append(None)"),
])
def test_a_clause_whose_statement_begins_above_the_region_is_shown(src, raw):
    edited = applied(src, raw)
    assert edited is not None
    ast.parse(edited)
    assert raw.split("\n")[0].strip() in edited


@pytest.mark.parametrize("src, raw", [
    # no `if` at the clause's depth: the line above it at that depth is a plain statement
    ("def f(x):\n    y = x\n    if x:\n        y = 1\n    y += 1\n    ‸\n    return y\n", "    elif y:\n        y = 0"),
    # a `for` goes on with an `else`, never an `elif`
    ("def f(x):\n    y = x\n    for i in x:\n        y += i\n    ‸\n    return y\n", "    elif y:\n        y = 0"),
    # the chain already ends with an `else`
    ("def f(x):\n    if x:\n        y = 1\n        z = 2\n        w = 3\n    else:\n        y = 2\n    ‸\n    return y\n",
     "    elif x > 1:\n        y = 3"),
    # `except` continues no `if`
    (RUNNING, "        except ValueError:\n            pass"),
    # the clause at a depth no statement is at
    ("def f(x):\n    for n in x:\n        if n:\n            y = n\n      ‸\n    return x\n", "      else:\n          y = 0"),
    # the clause is right, its body is not
    (CHAIN, ELIF.replace("):", ")")),
])
def test_a_clause_that_continues_nothing_stays_refused(src, raw):
    assert finished(src, raw)[1] is None


# --- the file's own indentation step -----------------------------------------------------------------

# HumanEval/80: functions indented by 4, nested blocks by 2; the editor typed the body 2 deeper
# than its `if`, and the planner's step (the file's smallest common indentation) is 4.
TWO_STEP = '''def is_happy(s):
    """Is s happy?"""
    if len(s) < 3:
      ‸

    for i in range(len(s) - 2):
      if s[i] == s[i+1] or s[i+1] == s[i+2] or s[i] == s[i+2]:
        return False
    return True
'''


def test_a_body_typed_one_step_of_the_files_own_deeper_stays_there():
    edited = applied(TWO_STEP, "      return False")
    assert "    if len(s) < 3:\n      return False\n" in edited, edited
    ast.parse(edited)


def test_a_multi_line_body_keeps_the_files_step_for_its_nested_lines():
    edited = applied(TWO_STEP, "      for c in s:\n        print(c)")
    assert "    if len(s) < 3:\n      for c in s:\n        print(c)\n" in edited, edited


def test_at_the_end_of_a_header_the_body_takes_the_files_step():
    src = TWO_STEP.replace("    if len(s) < 3:\n      ‸\n", "    if len(s) < 3:‸\n")
    edited = applied(src, "\n    return False")
    assert "    if len(s) < 3:\n      return False\n" in edited, edited


@pytest.mark.parametrize("typed, shown_indent", [
    ("      ", 8),        # 2 deeper is no step this file takes: the body goes one step (4) in
    ("            ", 12),  # deeper than a step: the editor's indentation stands, as before
])
def test_in_a_four_space_file_a_typed_body_is_not_moved_to_a_step_it_does_not_take(typed, shown_indent):
    src = ("def f(s):\n    for c in s:\n        print(c)\n    if s:\n" + typed + "‸\n    return s\n")
    edited = applied(src, typed + "return None")
    body = edited.split("\n")[4]
    assert body.strip() == "return None" and len(body) - len(body.lstrip()) == shown_indent, edited


def test_a_tab_indented_file_keeps_its_tabs():
    src = "def f(s):\n\tfor c in s:\n\t\tprint(c)\n\tif s:\n\t\t‸\n\treturn s\n"
    edited = applied(src, "\t\treturn None")
    assert "\tif s:\n\t\treturn None\n" in edited, edited


# --- names nothing defines -----------------------------------------------------------------------------

FUNC = "def f(values):\n    total = sum(values)\n    ‸\n    return total\n"


@pytest.mark.parametrize("raw", [
    "    assert_equal(total)",             # the shipped model's favourite: 49 shown lines failed on it
    "    assert_equal(total) == 1",
    "    self.assertEqual(total, 1)",      # `self` in a plain function: 17 more
    "    print(total, file=open_log())",   # a keyword argument's value is judged too
    "    total = [unknown(v) for v in values]",
])
def test_a_line_that_calls_a_name_nothing_defines_is_not_shown(raw):
    assert finished(FUNC, raw)[1] is None


@pytest.mark.parametrize("src, raw", [
    (FUNC, "    print(total)"),                                  # a builtin
    (FUNC, "    total.bit_length()"),                            # an attribute is not a name
    (FUNC, "    print(total, sep='')"),                          # nor is a keyword's name
    (FUNC, "    total = [g(v) for g in (abs,) for v in values]"),  # comprehension variables
    (FUNC, "    key = lambda v: -v"),                            # a lambda's parameter
    (FUNC, "    fix = lambda v: v\n    total = fix(total)"),     # the completion's own name
    (FUNC + "\n\ndef helper(v):\n    return v\n", "    total = helper(total)"),   # defined later on
    ("from numpy.testing import *\n" + FUNC, "    assert_equal(total)"),          # anything may come from *
    ("# checked with assert_equal from the test kit\n" + FUNC, "    assert_equal(total)"),  # the file mentions it
    (FUNC, "    width: Unknown = 3"),                            # annotations may never be evaluated
    (FUNC, "    print(__file__)"),                               # what every module has
    (FUNC, "    total = undefined_name + 1"),                    # a plain name may be bound next: only calls count
    ("foo(‸)\n", "bar(1)"),                                      # the file reads `foo` and binds it nowhere:
    ("Export(‸)\n", "Glob('*.c')"),                              # its names come from elsewhere (SConscript)
    ("def f(valué):\n    ‸\n", "    return valué + 1"),        # columns past a non-ASCII name
])
def test_callees_that_the_file_the_builtins_or_the_completion_define_are_shown(src, raw):
    assert finished(src, raw)[1] is not None


@pytest.mark.parametrize("raw", ["unknown_fn(1)", "unknown_fn(1) + len(\n    s)", "(1,\n     unknown_fn(1))"])
def test_a_call_after_non_ascii_text_on_the_line_is_found_where_it_lies(raw):
    # ast counts columns in UTF-8 bytes: 20 two-byte characters before the cursor, so counted
    # in characters the completion's range would end before its call starts
    assert finished("s = '" + "é" * 20 + "'; v = ‸\n", raw)[1] is None


def test_the_users_own_text_is_not_judged_only_what_the_completion_adds():
    # the user typed the unknown name; the completion only closes its call
    assert finished("def f(values):\n    assert_equal(‸)\n", "values)")[1] == "values"
    # mid-line, the completion calls an unknown name in a known line
    assert finished("def f(values):\n    return len(‸)\n", "unknown_thing(values)")[1] is None


def test_a_multi_line_body_is_cut_before_its_first_line_that_reads_an_unknown_name():
    src = "def f(values):\n    for v in values:‸\n    return values\n"
    assert finished(src, "\n        print(v)\n        assert_equal(v)") == (src.replace("‸", ""), "\n        print(v)")


STDLIB = Path(sysconfig.get_paths()["stdlib"])


def one_line_starts(source: str) -> set[int]:
    """1-based numbers of the lines that hold a whole statement, a whole compound statement's
    header or a whole `else:` / `try:` / `except ...:` / `finally:` line (no bracket or header
    running over to the next line: the planner reads such lines differently, a matter apart)."""
    lines = source.split("\n")
    starts = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and not isinstance(node, ast.ClassDef | ast.FunctionDef):
            if lines[node.lineno - 1].rstrip().endswith(":"):
                starts.add(node.lineno)
        elif node.end_lineno == node.lineno:
            starts.add(node.lineno)
    clause = ("else:", "try:", "finally:", "except:", "except ")
    starts.update(i + 1 for i, line in enumerate(lines) if line.strip().startswith(clause) and line.rstrip().endswith(":"))
    return starts


@pytest.mark.parametrize("name", ["textwrap.py", "shlex.py", "csv.py", "fractions.py"])
def test_real_lines_written_back_are_shown_as_they_were(name):
    """Every 5th one-line statement or clause line of a standard-library module that follows
    another, blanked to its indentation (what pressing Enter leaves) and written back as the model
    would: shown as it was, none refused for a name (the module defines or imports all of them),
    no `else:` / `elif` refused and none moved off the module's indentation (textwrap's nearby
    lines start at 8 and 12 columns: the planner's step read 8 there, and the body of an `if`
    went 8 deeper than it)."""
    source = (STDLIB / name).read_text(encoding="utf-8")
    lines = source.split("\n")
    starts = one_line_starts(source)
    picked = [i for i in sorted(starts)[1::5] if i - 1 in starts]   # 1-based; the line before is whole too
    assert len(picked) > 20
    wrong = []
    for number in picked:
        i = number - 1
        blanks = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
        src = "\n".join(lines[:i] + [blanks + "‸"] + lines[i + 1:])
        offset, text = src.index("‸"), src.replace("‸", "")
        span = plan_span(Snapshot.parse(text, "python"), offset, PlannerSettings())
        shown = finish(span, span.healed + lines[i].lstrip())
        if shown is None or text[:span.replace_start] + shown + text[span.replace_end:] != source:
            wrong.append((number, lines[i], shown))
    assert not wrong, wrong

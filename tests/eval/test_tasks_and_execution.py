import gzip
import os
import json
import sys
import time

import pytest

from dllm_lsp.eval.execution import run_program, run_programs
from dllm_lsp.eval.tasks import (
    FILES,
    Task,
    default_data_dir,
    load_tasks,
    resolve_data,
    spread_subset,
)

TASK = Task("T/0", "def inc(x):\n    return ", "\n", "x + 1", "def check(f):\n    assert f(1) == 2\n", "inc")


def test_program_is_prompt_completion_suffix_test_check():
    assert TASK.program("x + 1") == "def inc(x):\n    return x + 1\n\ndef check(f):\n    assert f(1) == 2\n\n\ncheck(inc)\n"


def test_execution_passes_fails_and_times_out():
    assert run_program(TASK.program("x + 1"), 10).passed
    wrong = run_program(TASK.program("x + 2"), 10)
    assert not wrong.passed and "AssertionError" in wrong.reason
    broken = run_program(TASK.program("x +"), 10)
    assert not broken.passed and "SyntaxError" in broken.reason
    slow = run_program("while True:\n    pass\n", 1)
    assert slow == type(slow)(False, "timeout")


@pytest.mark.parametrize("completion", ["exit()", "__import__('sys').exit()", "__import__('os')._exit(0)",
                                        "(_ for _ in ()).throw(SystemExit(0))"])
def test_a_completion_that_ends_the_interpreter_fails(completion):
    """Its status is 0 but its checks never ran: `exit()` alone passed most single-line tasks."""
    outcome = run_program(TASK.program(completion), 10)
    assert not outcome.passed and "before its checks had run" in outcome.reason


def test_a_timeout_is_kept_and_no_child_outlives_its_program(tmp_path):
    """A child in a session of its own, holding the program's pipes, held the eval past its
    timeout (for as long as it lived); a passing program's children ran on after it. The guard
    refuses subprocess and os.fork in a program (test_s33_program_guard.py), so the children start
    through ctypes, which it does not see: the group kill is what ends them."""
    def stray(marker, new_session: bool) -> str:
        child = tmp_path / f"{marker}.py"
        child.write_text(f"import pathlib, time\ntime.sleep(1.5)\npathlib.Path({str(tmp_path / marker)!r}).write_text('x')\n"
                         "time.sleep(8)\n")
        command = f"{'setsid ' if new_session else ''}{sys.executable} {child} &"
        return f"import ctypes\nctypes.CDLL(None).system({command.encode()!r})\n"

    started = time.monotonic()     # the child of a session of its own: out of the program's reach
    assert run_program(stray("escaped", True) + "while True:\n    pass\n", 1).reason == "timeout"
    assert time.monotonic() - started < 5
    assert run_program(stray("left", False), 10).passed
    time.sleep(2.5)
    assert not (tmp_path / "left").exists()       # the passing program's child was ended with it


def test_programs_run_in_their_own_folder():
    # A program that litters its working folder must not affect the next one.
    outcomes = run_programs(["import os\nassert not os.listdir('.') or os.listdir('.') == ['program.py']\n"
                             "open('junk', 'w').write('x')\n"] * 3, 10, 2)
    assert all(o.passed for o in outcomes)


def write_jsonl(path, records, gz=False):
    opener = gzip.open if gz else open
    with opener(path, "wt", encoding="utf-8") as fh:
        for r in records:
            fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")


def test_loading_checks_every_field(tmp_path):
    good = {"task_id": "T/0", "prompt": "a", "suffix": "b", "canonical_solution": "c", "test": "d", "entry_point": "e"}
    write_jsonl(tmp_path / "ok.jsonl.gz", [good, good], gz=True)
    assert len(load_tasks(tmp_path / "ok.jsonl.gz")) == 2
    write_jsonl(tmp_path / "missing.jsonl", [{k: v for k, v in good.items() if k != "test"}])
    with pytest.raises(ValueError, match="lacks test"):
        load_tasks(tmp_path / "missing.jsonl")
    write_jsonl(tmp_path / "junk.jsonl", ["{not json"])
    with pytest.raises(ValueError, match="not a JSON line"):
        load_tasks(tmp_path / "junk.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="no tasks"):
        load_tasks(tmp_path / "empty.jsonl")
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match="cannot read"):
        load_tasks(tmp_path / "bad.jsonl.gz")
    with pytest.raises(ValueError, match="does not exist"):
        resolve_data(str(tmp_path / "nope.jsonl"))


def test_limit_spreads_over_the_file():
    tasks = [Task(f"T/{i}", "", "", "", "", "") for i in range(10)]
    assert [t.task_id for t in spread_subset(tasks, 5)] == ["T/0", "T/2", "T/4", "T/6", "T/8"]
    assert spread_subset(tasks, None) == tasks and spread_subset(tasks, 50) == tasks
    with pytest.raises(ValueError, match="at least 1"):
        spread_subset(tasks, 0)


# Under CI=true the shared data must be there (CI clones the repo with shared/ beside it).
@pytest.mark.skipif(not (default_data_dir() / FILES["single-line"]).is_file() and os.environ.get("CI") != "true",
                    reason="shared eval data absent")
def test_canonical_solutions_pass_and_empty_ones_mostly_fail():
    tasks = spread_subset(load_tasks(resolve_data("single-line")), 24)
    assert len({t.task_id.split("/")[2] for t in tasks}) > 10    # many different problems
    assert all(o.passed for o in run_programs([t.program(t.canonical_solution) for t in tasks], 20, 2))
    assert sum(o.passed for o in run_programs([t.program("") for t in tasks], 20, 2)) <= 2


@pytest.mark.parametrize("data, typed_chars", [("single-line", 0), ("multi-line", 0), ("random-span-light", 0),
                                               ("single-line", 3), ("multi-line", 2)])
def test_every_task_opens_in_an_editor_where_its_middle_goes(data, typed_chars):
    """The editor mode's document: the middle's indentation typed where it starts a line (and with
    `typed_chars`, that many characters of its text after it, all but the line's last at most),
    its line opened where it ends one; writing the rest of the middle at the cursor gives back the
    benchmark's own program, for every task of the file."""
    typed_some = 0
    for task in load_tasks(resolve_data(data)):
        document, cursor = task.in_editor(typed_chars)
        typed = document[len(task.prompt):cursor]
        assert document.startswith(task.prompt) and task.canonical_solution.startswith(typed)
        text = typed.lstrip(" \t")
        first_line = task.canonical_solution[len(typed) - len(text):].split("\n", 1)[0]
        assert len(text) == min(typed_chars, max(len(first_line) - 1, 0))
        rest = task.canonical_solution[len(typed):]
        if document[cursor:] != task.suffix:             # the middle's line is open: its newline is there
            assert rest.endswith("\n") and document[cursor:] == "\n" + task.suffix
            rest = rest[:-1]
        assert document[:cursor] + rest + document[cursor:] == task.prompt + task.canonical_solution + task.suffix
        typed_some += bool(typed)
    assert typed_some > 0


@pytest.mark.parametrize("data", ["single-line", "random-span-light"])
def test_typed_through_puts_the_cursor_just_after_the_lines_first_such_character(data):
    chars = "([{.=,\"'"
    kept = 0
    for task in load_tasks(resolve_data(data)):
        count = task.typed_through(chars)
        document, cursor = task.in_editor(through=chars)
        if count is None:
            assert (document, cursor) == task.in_editor()     # nothing of the line typed
            continue
        kept += 1
        line_start = document.rfind("\n", 0, cursor) + 1
        typed = document[line_start:cursor].lstrip(" \t") if task.prompt.endswith("\n") or not task.prompt \
            else document[len(task.prompt):cursor]
        assert len(typed) == count and typed[-1] in chars and not set(typed[:-1]) & set(chars)
        rest = task.canonical_solution[cursor - len(task.prompt):]
        assert rest.split("\n", 1)[0]                            # something is left to write on the line
        if document[cursor:] != task.suffix:
            rest = rest[:-1]
        assert document[:cursor] + rest + document[cursor:] == task.prompt + task.canonical_solution + task.suffix
    assert kept > 100


def test_a_task_in_the_editor_runs_as_its_program():
    task = Task("T/1", "def inc(x):\n", "\n", "    return x + 1\n", "def check(f):\n    assert f(1) == 2\n", "inc")
    document, cursor = task.in_editor()
    assert (document, cursor) == ("def inc(x):\n    \n\n", len("def inc(x):\n    "))
    assert run_program(task.run_as(document[:cursor] + "return x + 1" + document[cursor:]), 20).passed
    assert not run_program(task.run_as(document), 20).passed

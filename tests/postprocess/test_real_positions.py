"""The parse check on real files: at random positions of standard-library modules, whatever
finish() lets through must leave a file that CPython still parses, whatever the model proposes
(the true rest of the line, a docstring closer, a stray colon, another line of the file). And the
three cases issue 14 found in the wild are refused."""
from __future__ import annotations

import ast
import random
import sysconfig
import warnings
from pathlib import Path

import pytest

from dllm_lsp.options import Options
from dllm_lsp.pipeline import plan
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax.snapshot import Snapshot

STDLIB = Path(sysconfig.get_paths()["stdlib"])
FILES = ("textwrap.py", "_threading_local.py", "bisect.py", "heapq.py", "shlex.py", "csv.py", "json/decoder.py",
         "fractions.py", "statistics.py", "dataclasses.py")
POSITIONS = 60


def parse(text: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the stdlib's own invalid escape sequences
        ast.parse(text)


def parses(text: str) -> bool:
    try:
        parse(text)
    except SyntaxError:
        return False
    return True


def offset_of(text: str, line: int, col: int) -> int:
    """1-based line and column, as the issue gives them."""
    lines = text.split("\n")
    return sum(len(l) + 1 for l in lines[:line - 1]) + col - 1


def inserted(text: str, span, completion: str | None) -> str | None:
    shown = finish(span, completion) if completion is not None else None
    if shown is None:
        return None
    return text[:span.replace_start] + shown + text[span.replace_end:]


def positions(rng: random.Random):
    for name in FILES:
        text = (STDLIB / name).read_text(encoding="utf-8")
        lines = text.split("\n")
        candidates = [(i, c) for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")
                      for c in range(len(line) - len(line.lstrip()) + 1, len(line)) if line[c - 1] in " (,=:.["]
        for i, c in rng.sample(candidates, POSITIONS // len(FILES)):
            yield name, text, lines, i, c


def first_error(text: str) -> tuple[int, int] | None:
    try:
        parse(text)
    except SyntaxError as exc:
        return (exc.lineno or 0, exc.offset or 0)
    return None


def test_nothing_shown_at_real_positions_breaks_the_file():
    """The user has typed up to a random spot of a real line (the rest of the line not yet there);
    whatever is shown must leave the file parsing if the typed-so-far file parsed, and must never
    put CPython's first error before where it was (a completion may fix the half-typed line, or
    leave it as it was, but not break what comes before or after it)."""
    rng = random.Random(14)
    shown = restored = 0
    for name, text, lines, i, c in positions(rng):
        rest = lines[i][c:]
        cursor = offset_of(text, i + 1, c + 1)
        typed = text[:cursor] + text[cursor + len(rest):]          # the line cut at the cursor
        span = plan(Snapshot.parse(typed, "python"), cursor, Options()).span
        other = rng.choice(lines).strip()
        before = first_error(typed)
        for proposal in (rest, '"""', '  """', rest + ":", "hi:", ")", "x) return 1", other, rest + "\n" + other):
            edited = inserted(typed, span, proposal)
            if edited is None:
                continue
            shown += 1
            after = first_error(edited)
            where = f"{name}:{i + 1}:{c + 1}: showing {proposal!r}"
            if before is None:
                assert after is None, f"{where} breaks a file that parsed"
            elif after is not None:
                assert after[0] >= before[0], f"{where} puts the first error on line {after[0]}, before {before[0]}"
        restored += inserted(typed, span, rest) == text
    assert shown >= POSITIONS                     # the check is not refusing everything
    assert restored >= POSITIONS // 2             # the line's own rest is let through (it restores the file)


@pytest.mark.parametrize("name,line,col,proposal", [
    ("textwrap.py", 485, 5, "return self.assertEqual(x)"),
    ("_threading_local.py", 62, 9, '  """'),
    ("bisect.py", 44, 19, "1: hi:"),
])
def test_the_cases_found_in_the_wild_are_refused_or_made_safe(name, line, col, proposal):
    text = (STDLIB / name).read_text(encoding="utf-8")
    if len(text.split("\n")) < line:
        pytest.skip(f"{name} of this Python is shorter than the issue's")
    span = plan(Snapshot.parse(text, "python"), offset_of(text, line, col), Options()).span
    edited = inserted(text, span, proposal)
    assert edited is None or parses(edited)

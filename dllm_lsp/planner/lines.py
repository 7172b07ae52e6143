"""Line and indentation helpers over plain text (the "line rules" every language falls back to).

All of them look only at the lines near an offset, so they cost the same in a huge file.
"""
from __future__ import annotations

import re
from collections import Counter

TAB_SIZE = 4
_INDENT_SAMPLE_CHARS = 3000   # indentation is guessed from this much text around the cursor
_INDENTS = re.compile(r"^([ \t]*)\S", re.MULTILINE)   # leading whitespace of non-blank lines
# A line that opens a block: a Python compound statement's header, or a line ending in `{`.
_BLOCK_HEADER = re.compile(r"[ \t]*(?:(?:async[ \t]+)?(?:def|class|if|elif|else|for|while|try|except|finally|with|"
                           r"match|case)\b.*:[ \t]*(?:#.*)?|.*\{[ \t]*)\r?$")


def line_bounds(text: str, offset: int) -> tuple[int, int]:
    """[start, end) of the line holding `offset`; end is the index of its newline (or len), or of
    the carriage return of a CRLF line ending."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    end = len(text) if end < 0 else end
    if end > offset and text[end - 1] == "\r":
        end -= 1
    return start, end


def line_break_near(text: str, offset: int, window: int = 4000) -> str:
    """The line break the file uses at `offset`: that of the line holding it, else (the last line
    has none) that of the line before; "\r" where only lone CRs end lines near it; "\n" in a
    file of one line. Text the server inserts uses it, so a CRLF file gets no LF-only lines."""
    end = text.find("\n", offset, offset + window)
    if end < 0:
        end = text.rfind("\n", max(0, offset - window), offset)
    if end < 0:   # no LF near: classic Mac line ends, if there is a lone CR
        return "\r" if "\r" in text[max(0, offset - window):offset + window] else "\n"
    return "\r\n" if end > 0 and text[end - 1] == "\r" else "\n"


def leading_ws(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_width(ws: str, tab_size: int = TAB_SIZE) -> int:
    width = 0
    for ch in ws:
        width = (width // tab_size + 1) * tab_size if ch == "\t" else width + 1
    return width


def render_indent(width: int, unit: str, tab_size: int = TAB_SIZE) -> str:
    """Whitespace of `width` columns written the way the file writes it (tabs or spaces)."""
    if unit.startswith("\t"):
        return "\t" * (width // tab_size) + " " * (width % tab_size)
    return " " * width


def previous_nonblank_line(text: str, line_start: int) -> tuple[int, str] | None:
    """(start, text) of the last non-blank line before the line starting at `line_start`."""
    end = line_start - 1
    while end > 0:
        start = text.rfind("\n", 0, end) + 1
        line = text[start:end].rstrip("\r")
        if line.strip():
            return start, line
        end = start - 1
    return None


def next_nonblank_line(text: str, line_end: int) -> tuple[int, str] | None:
    """(start, text) of the first non-blank line after the line ending at `line_end`."""
    start = line_end + 1
    while start <= len(text) and start > 0:
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end].rstrip("\r")
        if line.strip():
            return start, line
        if end >= len(text):
            return None
        start = end + 1
    return None


def block_steps(text: str, offset: int) -> Counter:
    """How many block headers near `offset` indent their first body line by how many columns.

    The indentation step is what a block adds to the line that opens it, not the smallest
    indentation in sight: a stretch of a class's methods has no line at 4 columns, and
    continuation lines aligned to a bracket sit at any column."""
    low = max(0, offset - _INDENT_SAMPLE_CHARS // 2)
    low = text.rfind("\n", 0, low) + 1
    lines = [line for line in text[low:low + _INDENT_SAMPLE_CHARS].split("\n") if line.strip()]
    steps: Counter = Counter()
    for header, body in zip(lines, lines[1:]):
        if _BLOCK_HEADER.match(header):
            step = indent_width(leading_ws(body)) - indent_width(leading_ws(header))
            if step > 0:
                steps[step] += 1
    return steps


def usual_step(steps: Counter, prefer: int | None = None) -> int:
    """The most common of `steps` (not empty): `prefer` where it is one of the most common, else
    the smallest of them."""
    most = max(steps.values())
    return prefer if steps.get(prefer) == most else min(step for step, n in steps.items() if n == most)


def detect_indent_unit(text: str, offset: int, default: str) -> str:
    """The file's indentation step near `offset`: a tab where most lines are indented with tabs,
    else the usual step from a block header to its body (`block_steps`), else (no header near)
    the smallest space indentation that several lines use."""
    low = max(0, offset - _INDENT_SAMPLE_CHARS // 2)
    counts = Counter(_INDENTS.findall(text, low, low + _INDENT_SAMPLE_CHARS))
    tabs = sum(n for ws, n in counts.items() if ws.startswith("\t"))
    spaced = {len(ws): n for ws, n in counts.items() if ws.startswith(" ") and "\t" not in ws}
    if tabs > sum(spaced.values()):
        return "\t"
    steps = Counter({step: n for step, n in block_steps(text, offset).items() if 1 < step <= 8})
    if steps:
        return " " * usual_step(steps)
    widths = [width for width in spaced if 1 < width <= 8]
    usual = [width for width in widths if spaced[width] >= 2] or widths   # one odd line is no evidence
    if usual:
        return " " * min(usual)
    if not tabs:
        # No line is indented yet (a new file): what was typed on the cursor's line is all the
        # evidence there is, and a body whose first line has the tab and the rest spaces mixes them.
        typed = leading_ws(text[line_bounds(text, offset)[0]:offset])
        if typed.startswith("\t"):
            return "\t"
        if 1 < len(typed) <= 8 and "\t" not in typed:
            return typed
    return default

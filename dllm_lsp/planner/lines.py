"""Line and indentation helpers over plain text (the "line rules" every language falls back to).

All of them look only at the lines near an offset, so they cost the same in a huge file.
"""
from __future__ import annotations

import re
from collections import Counter

TAB_SIZE = 4
_INDENT_SAMPLE_CHARS = 3000   # indentation is guessed from this much text around the cursor
_INDENTS = re.compile(r"^([ \t]*)\S", re.MULTILINE)   # leading whitespace of non-blank lines


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


def detect_indent_unit(text: str, offset: int, default: str) -> str:
    """The file's indentation step near `offset`: a tab, or the smallest space indentation that
    several lines use (first-level lines are indented by exactly one step)."""
    low = max(0, offset - _INDENT_SAMPLE_CHARS // 2)
    counts = Counter(_INDENTS.findall(text, low, low + _INDENT_SAMPLE_CHARS))
    tabs = sum(n for ws, n in counts.items() if ws.startswith("\t"))
    spaced = {len(ws): n for ws, n in counts.items() if ws.startswith(" ") and "\t" not in ws}
    if tabs > sum(spaced.values()):
        return "\t"
    widths = [width for width in spaced if 1 < width <= 8]
    usual = [width for width in widths if spaced[width] >= 2] or widths   # one odd line is no evidence
    if usual:
        return " " * min(usual)
    if not tabs:
        # No line is indented yet (a new file): what was typed on the cursor's line is all the
        # evidence there is, and a body whose first line has the tab and the rest spaces mixes them.
        start = line_bounds(text, offset)[0]
        typed = text[start:offset][:len(text[start:offset]) - len(text[start:offset].lstrip(" \t"))]
        if typed.startswith("\t"):
            return "\t"
        if 1 < len(typed) <= 8 and "\t" not in typed:
            return typed
    return default

"""Line and indentation helpers over plain text (the "line rules" every language falls back to).

All of them look only at the lines near an offset, so they cost the same in a huge file.
"""
from __future__ import annotations

from collections import Counter

TAB_SIZE = 4
_INDENT_SAMPLE_CHARS = 12_000   # indentation is guessed from this much text around the cursor


def line_bounds(text: str, offset: int) -> tuple[int, int]:
    """[start, end) of the line holding `offset`; end is the index of its newline (or len)."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return start, (len(text) if end < 0 else end)


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
        line = text[start:end]
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
        line = text[start:end]
        if line.strip():
            return start, line
        if end >= len(text):
            return None
        start = end + 1
    return None


def detect_indent_unit(text: str, offset: int, default: str) -> str:
    """The file's indentation step near `offset`: a tab, or the most common increase in spaces."""
    lo = max(0, offset - _INDENT_SAMPLE_CHARS // 2)
    sample = text[lo: lo + _INDENT_SAMPLE_CHARS].split("\n")[1:-1] if lo else \
        text[:_INDENT_SAMPLE_CHARS].split("\n")[:-1] or [text]
    tabs = spaces = 0
    steps: Counter[int] = Counter()
    previous = 0
    for line in sample:
        if not line.strip():
            continue
        ws = leading_ws(line)
        if ws.startswith("\t"):
            tabs += 1
            continue
        width = len(ws)
        if width:
            spaces += 1
        if width > previous:
            steps[width - previous] += 1
        previous = width
    if tabs > spaces:
        return "\t"
    if spaces and steps:
        step = steps.most_common(1)[0][0]
        if 1 < step <= 8:
            return " " * step
    return default

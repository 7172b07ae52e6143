"""Apply LSP-shaped edits to text in tests (ASCII texts: UTF-16 columns are string columns)."""
from __future__ import annotations

import itertools


def offset(text: str, line: int, character: int) -> int:
    lines = text.split("\n")
    assert line < len(lines) and character <= len(lines[line]), (line, character)
    return sum(len(l) + 1 for l in lines[:line]) + character


def apply_text_edits(text: str, edits: list[dict]) -> str:
    """`edits` as JSON: [{"range": {"start": {...}, "end": {...}}, "newText": ...}], non-overlapping."""
    spans = []
    for edit in edits:
        start, end = edit["range"]["start"], edit["range"]["end"]
        spans.append((offset(text, start["line"], start["character"]),
                      offset(text, end["line"], end["character"]), edit["newText"]))
    spans.sort()
    for (_, end, _), (start, _, _) in itertools.pairwise(spans):
        assert end <= start, "edits overlap"
    for start, end, new_text in reversed(spans):
        text = text[:start] + new_text + text[end:]
    return text

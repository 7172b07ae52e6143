"""Apply LSP-shaped edits (UTF-16 positions) to text in tests."""
from __future__ import annotations

import itertools


def offset(text: str, line: int, character: int) -> int:
    """String offset of an LSP position counted in UTF-16 code units (the default encoding)."""
    lines = text.split("\n")
    assert line < len(lines), (line, character)
    units, column = 0, 0
    for char in lines[line]:
        if units >= character:
            break
        units += 2 if ord(char) > 0xFFFF else 1
        column += 1
    assert units == character, (line, character, "not at a character boundary")
    return sum(len(l) + 1 for l in lines[:line]) + column


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

"""LSP positions <-> Python string offsets, with the range checks pygls leaves out
(it clamps an out-of-range position silently; we answer InvalidParams instead)."""
from __future__ import annotations

import bisect

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.workspace.position_codec import PositionCodec
from pygls.workspace.text_document import TextDocument


def line_starts(text: str) -> list[int]:
    starts = [0]
    index = text.find("\n")
    while index != -1:
        starts.append(index + 1)
        index = text.find("\n", index + 1)
    return starts


def offset_of(document: TextDocument, position: types.Position) -> int:
    """The string offset of `position`, or InvalidParams when it is outside the document."""
    return offset_in_text(document.source, position, document.position_codec)


def offset_in_text(text: str, position: types.Position, codec: PositionCodec) -> int:
    """Like offset_of, over plain text: the document store mirrors edits with it."""
    if position.line < 0 or position.character < 0:
        raise JsonRpcInvalidParams(f"position {position.line}:{position.character} is negative")
    starts = line_starts(text)
    if position.line >= len(starts):
        raise JsonRpcInvalidParams(
            f"line {position.line} is past the end of the document ({len(starts)} lines)"
        )
    start = starts[position.line]
    end = starts[position.line + 1] - 1 if position.line + 1 < len(starts) else len(text)
    line = text[start:end].rstrip("\r")
    units = 0
    for i, char in enumerate(line):
        if units >= position.character:
            if units > position.character:
                raise JsonRpcInvalidParams("position splits a character")
            return start + i
        units += codec.impl.code_units_for_char(char)
    if units == position.character:
        return start + len(line)
    raise JsonRpcInvalidParams(
        f"character {position.character} is past the end of line {position.line} ({units} units)"
    )


def position_in_text(text: str, offset: int, codec: PositionCodec) -> types.Position:
    starts = line_starts(text)
    line = bisect.bisect_right(starts, offset) - 1
    prefix = text[starts[line]:offset]
    return types.Position(line=line, character=codec.client_num_units(prefix))


def range_of(document: TextDocument, start: int, end: int) -> types.Range:
    return range_in_text(document.source, start, end, document.position_codec)


def range_in_text(text: str, start: int, end: int, codec: PositionCodec) -> types.Range:
    """The LSP range of [start, end) in `text` (a completion's own snapshot, say)."""
    return types.Range(start=position_in_text(text, start, codec), end=position_in_text(text, end, codec))

"""LSP positions <-> Python string offsets, with the range checks pygls leaves out
(it clamps an out-of-range position silently; we answer InvalidParams instead).

Lines end where LSP says they do: at `\r\n`, `\r` or `\n`, and nowhere else. pygls splits with
`str.splitlines`, which also breaks at a form feed, `\x0b`, `\x1c`-`\x1e`, `\x85`, U+2028 and
U+2029; a client does not, so an edit below such a character would land on the wrong line.
`LspTextDocument` gives pygls the client's lines.
"""
from __future__ import annotations

import bisect
import re

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.workspace.position_codec import PositionCodec
from pygls.workspace.text_document import TextDocument


EOL = re.compile(r"\r\n|\r|\n")
# a line with its end, as pygls' `lines` holds them (no empty line after a final line end)
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in EOL.finditer(text))]


def line_end(text: str, start: int) -> int:
    """Where the line starting at `start` ends, before its line end."""
    found = EOL.search(text, start)
    return found.start() if found else len(text)


def lsp_lines(text: str) -> tuple[str, ...]:
    return tuple(_LINE.findall(text))


class LspTextDocument(TextDocument):
    """pygls' document with LSP's lines: its incremental edits and position conversions index
    the lines the client counts."""

    @property
    def lines(self) -> tuple[str, ...]:
        return lsp_lines(self.source)

    def _apply_incremental_change(self, change: types.TextDocumentContentChangePartial) -> None:
        # pygls clamps a character past the line's end to one before it, counted without a CRLF's
        # `\r`: text typed at the end of a CRLF line split its line end, and the server's text
        # drifted from the client's for good
        text = self.source
        start, end = edit_range(text, change.range, self.position_codec)
        self._source = text[:start] + change.text + text[end:]


def edit_range(text: str, lsp_range: types.Range, codec: PositionCodec) -> tuple[int, int]:
    """The offsets a didChange range replaces (edit_offset), the end never before the start."""
    starts = line_starts(text)
    start = edit_offset(text, lsp_range.start, codec, starts)
    return start, max(start, edit_offset(text, lsp_range.end, codec, starts))


def edit_offset(text: str, position: types.Position, codec: PositionCodec, starts: list[int]) -> int:
    """Where a didChange position lands, by LSP's rule: a character past the line's end is the
    line's end (before its line break); a line past the last is the document's end; a position
    inside a character (half a surrogate pair) is after it. Requests are stricter (offset_in_text):
    an edit the client already made must be mirrored, not refused. `starts`: line_starts(text)."""
    if position.line >= len(starts):
        return len(text)
    start = starts[position.line]
    end = line_end(text, start)
    units = 0
    for i in range(start, end):
        if units >= position.character:
            return i
        units += codec.impl.code_units_for_char(text[i])
    return end


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
    line = text[start:line_end(text, start)]
    units = 0
    for i, char in enumerate(line):
        if units >= position.character:
            if units > position.character:
                raise JsonRpcInvalidParams("position splits a character")
            return start + i
        units += codec.impl.code_units_for_char(char)
    if units == position.character:
        return start + len(line)
    if line and units - codec.impl.code_units_for_char(line[-1]) < position.character < units:
        raise JsonRpcInvalidParams("position splits a character")   # the line's last one
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

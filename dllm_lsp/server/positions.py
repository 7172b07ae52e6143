"""LSP positions <-> Python string offsets, with the range checks pygls leaves out
(it clamps an out-of-range position silently; we answer InvalidParams instead).

Lines end where LSP says they do: at `\r\n`, `\r` or `\n`, and nowhere else. pygls splits with
`str.splitlines`, which also breaks at a form feed, `\x0b`, `\x1c`-`\x1e`, `\x85`, U+2028 and
U+2029; a client does not, so an edit below such a character would land on the wrong line.
`LspTextDocument` gives pygls the client's lines.

Lone surrogates. A client whose strings are UTF-16 (VS Code, any JavaScript client: JSON.stringify
writes `"\\ud800"`) may send a lone surrogate, and an edit may later put a low surrogate right
after a high one: the client then holds one astral character there (2 UTF-16 units, 4 UTF-8
bytes, 1 code point), where two U+FFFD would count 6 bytes and 2 code points. So the document
keeps the client's text as a Python string of its UTF-16 code units read as code points
(`client_text`): a pair is always one character, a lone surrogate stays one. pygls' codec counts a
lone surrogate as 1 UTF-16 unit, 3 UTF-8 bytes (its WTF-8 form, and the U+FFFD a UTF-8 encoder
writes for it: TextEncoder, Rust's from_utf16_lossy) and 1 code point. Everything else in the
server (tree-sitter, the tokenizer, the planner) reads `plain_text`: the same characters with each
lone surrogate as U+FFFD, which counts the same in every encoding, so an offset in one is the
same offset in the other. (The transport keeps lone surrogates in document texts only: didOpen's
text and didChange's change texts, once it does: docs/protocol.md.)
"""
from __future__ import annotations

import bisect
import functools
import re
from itertools import accumulate, repeat
from operator import add
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.workspace.position_codec import PositionCodec
from pygls.workspace.text_document import TextDocument

from dllm_lsp.syntax.snapshot import has_lone_cr


EOL = re.compile(r"\r\n|\r|\n")
SURROGATE = re.compile("[\ud800-\udfff]")
# a line with its end, as pygls' `lines` holds them (no empty line after a final line end)
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


@functools.lru_cache(maxsize=4)
def line_starts(text: str) -> tuple[int, ...]:
    """Where each line of `text` starts (a table of the whole text: the CLI's and the lone-CR
    path's; the server's per-edit lookups use line_start / line_of, which cost no Python loop
    over the lines)."""
    if has_lone_cr(text):
        return (0, *(m.end() for m in EOL.finditer(text)))
    return tuple(accumulate(map(add, map(len, text.split("\n")[:-1]), repeat(1)), initial=0))


def line_start(text: str, line: int) -> int | None:
    """Where line `line` (0-based) of `text` starts; None past its last line. Without lone CRs the
    `line`-th line feed is found by halving with str.count (C speed, nothing allocated): each
    content change of a didChange looks up its range so, and a Python loop over every line break
    made a Replace All of 1,500 places in a 9,000-line file block the server for 11 s."""
    if line <= 0:
        return 0
    if has_lone_cr(text):
        starts = line_starts(text)
        return starts[line] if line < len(starts) else None
    lo, hi, need = 0, min(len(text), 4096), line
    while text.count("\n", 0, hi) < need:   # doubling: the cost follows the line, not the file
        if hi == len(text):
            return None
        hi = min(len(text), 2 * hi)
    while hi - lo > 256:
        mid = (lo + hi) // 2
        found = text.count("\n", lo, mid)
        if found >= need:
            hi = mid
        else:
            need -= found
            lo = mid
    at = lo
    for _ in range(need):
        at = text.index("\n", at) + 1
    return at


def line_of(text: str, offset: int) -> tuple[int, int]:
    """(0-based line, where it starts) of the line holding `offset`."""
    if has_lone_cr(text):
        starts = line_starts(text)
        line = bisect.bisect_right(starts, offset) - 1
        return line, starts[line]
    return text.count("\n", 0, offset), text.rfind("\n", 0, offset) + 1


def line_end(text: str, start: int) -> int:
    """Where the line starting at `start` ends, before its line end."""
    found = EOL.search(text, start)
    return found.start() if found else len(text)


def lsp_lines(text: str) -> tuple[str, ...]:
    return tuple(_LINE.findall(text))


def client_text(text: str) -> str:
    """`text` with each high surrogate that is followed by a low one joined to it, as the client's
    UTF-16 string reads them (json.loads joins a pair only within one string: `"\\ud83d"` typed,
    then `"\\ude00"` after it, is one character in the client)."""
    if not SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def plain_text(text: str) -> str:
    """`text` (a client_text) with each lone surrogate as U+FFFD, character for character: no
    tokenizer takes a lone surrogate, and U+FFFD counts as many units in every encoding."""
    return SURROGATE.sub("\ufffd", text) if SURROGATE.search(text) else text


class LspTextDocument(TextDocument):
    """pygls' document with LSP's lines: its incremental edits and position conversions index
    the lines the client counts. `source` is the plain text; the client's own (lone surrogates
    and all, see the module's docstring) is kept to apply the client's edits to."""

    def __init__(self, uri: str, source: str | None = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(uri, source, *args, **kwargs)
        self._set_text(client_text(source or ""))

    def _set_text(self, text: str, scan: bool = True) -> None:
        # scan=False: the edit put no surrogate in a text that had none (the text is its own plain
        # text; a scan of the whole text at each content change of a Replace All would cost a
        # pass over the file per change)
        self._client_text = text
        self._source = plain_text(text) if scan else text

    @property
    def client_source(self) -> str:
        """The text as the client holds it: lone surrogates kept (module docstring)."""
        return self._client_text

    @property
    def lines(self) -> tuple[str, ...]:
        return lsp_lines(self.source)

    def _apply_incremental_change(self, change: types.TextDocumentContentChangePartial) -> None:
        # pygls clamps a character past the line's end to one before it, counted without a CRLF's
        # `\r`: text typed at the end of a CRLF line split its line end, and the server's text
        # drifted from the client's for good
        text, put = apply_edit(self._client_text, change.range, change.text, self.position_codec)
        self._set_text(text, scan=put or self._source is not self._client_text)

    def _apply_full_change(self, change: types.TextDocumentContentChangeEvent) -> None:
        self._set_text(client_text(change.text))


def apply_edit(text: str, lsp_range: types.Range, insert: str, codec: PositionCodec) -> tuple[str, bool]:
    """`text` (a client_text) after a didChange edit, still a client_text: a surrogate the edit
    puts next to its other half is joined to it. And whether the edit put a surrogate in (else a
    text without any still has none)."""
    start, end = edit_range(text, lsp_range, codec)
    edited = text[:start] + insert + text[end:]
    at, to = max(0, start - 1), start + len(insert) + 1   # where a pair can be made: the edges
    if SURROGATE.search(edited, at, to):
        edited = edited[:at] + client_text(edited[at:to]) + edited[to:]
    return edited, SURROGATE.search(insert) is not None


def edit_range(text: str, lsp_range: types.Range, codec: PositionCodec) -> tuple[int, int]:
    """The offsets a didChange range replaces (edit_offset), the end never before the start."""
    start = edit_offset(text, lsp_range.start, codec)
    return start, max(start, edit_offset(text, lsp_range.end, codec))


def edit_offset(text: str, position: types.Position, codec: PositionCodec) -> int:
    """Where a didChange position lands, by LSP's rule: a character past the line's end is the
    line's end (before its line break); a line past the last is the document's end; a position
    inside a character (half a surrogate pair, a byte inside a UTF-8 sequence) is after it.
    Requests are stricter (offset_in_text): an edit the client already made must be mirrored,
    not refused. The same offset in a client_text and in its plain_text (character for character)."""
    start = line_start(text, position.line)
    if start is None:
        return len(text)
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
    start = line_start(text, position.line)
    if start is None:
        raise JsonRpcInvalidParams(
            f"line {position.line} is past the end of the document ({len(line_starts(text))} lines)"
        )
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
    line, start = line_of(text, offset)
    return types.Position(line=line, character=codec.client_num_units(text[start:offset]))


def range_of(document: TextDocument, start: int, end: int) -> types.Range:
    return range_in_text(document.source, start, end, document.position_codec)


def range_in_text(text: str, start: int, end: int, codec: PositionCodec) -> types.Range:
    """The LSP range of [start, end) in `text` (a completion's own snapshot, say)."""
    return types.Range(start=position_in_text(text, start, codec), end=position_in_text(text, end, codec))

"""Lines end where LSP says (`\\r\\n`, `\\r`, `\\n`) and nowhere else: a form feed, U+2028 or NEL
inside a line is a character of that line for the client, so it must be for the server too, or an
edit typed below it lands on another line and the server completes a text the user never wrote."""
from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.workspace.position_codec import PositionCodec

from dllm_lsp.server.positions import (LspTextDocument, line_of, line_start, line_starts, lsp_lines, offset_in_text,
                                       position_in_text)

from .raw_rpc import RawClient
from .test_transport import OPTIONS, stop

# characters str.splitlines breaks at and LSP does not
INLINE_BREAKERS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def typed(text: str, line: int, character: int, insert: str) -> str:
    document = LspTextDocument("file:///t.py", text)
    document.apply_change(types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(line, character), types.Position(line, character)), text=insert))
    return document.source


@pytest.mark.parametrize("breaker", INLINE_BREAKERS)
def test_an_edit_below_an_inline_breaker_lands_on_the_clients_line(breaker):
    text = f"# one{breaker}two\nz = \n"
    assert lsp_lines(text) == (f"# one{breaker}two\n", "z = \n")
    assert typed(text, 1, 4, "1") == f"# one{breaker}two\nz = 1\n"


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_each_lsp_line_end_ends_a_line(end):
    text = f"a = 1{end}b = {end}"
    assert line_starts(text) == (0, 5 + len(end), 9 + 2 * len(end))
    assert [line_start(text, n) for n in range(4)] == [0, 5 + len(end), 9 + 2 * len(end), None]
    assert typed(text, 1, 4, "2") == f"a = 1{end}b = 2{end}"
    assert offset_in_text(text, types.Position(1, 4), PositionCodec()) == 9 + len(end)
    with pytest.raises(Exception, match="past the end of line 0"):
        offset_in_text(text, types.Position(0, 6), PositionCodec())


def edited(text: str, start: tuple[int, int], end: tuple[int, int], insert: str) -> str:
    document = LspTextDocument("file:///t.py", text)
    document.apply_change(types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(*start), types.Position(*end)), text=insert))
    return document.source


@pytest.mark.parametrize("text, start, end, insert, expected", [
    ("ab\r\ncd\n", (0, 3), (0, 3), "X", "abX\r\ncd\n"),   # pygls: "ab\rX\ncd\n", a line more
    ("ab\ncd\n", (0, 3), (0, 3), "X", "abX\ncd\n"),         # pygls: at the start of the next line
    ("ab\ncd\n", (0, 0), (0, 3), "", "\ncd\n"),              # pygls: the line end went too
    ("ab\ncd", (1, 0), (1, 99), "Z", "ab\nZ"),               # pygls: "ab\nZd"
    ("ab\rcd", (0, 9), (1, 1), "", "abd"),                    # lone CR, past its end
    ("ab\ncd", (5, 0), (5, 0), "!", "ab\ncd!"),             # a line past the last: the end
    ("a\U0001F600b\n", (0, 2), (0, 2), "X", "a\U0001F600Xb\n"),   # half a surrogate pair: after it
])
def test_a_change_past_a_lines_end_is_clamped_to_it_as_lsp_says(text, start, end, insert, expected):
    """LSP: a character past the line's length is the line's length. pygls clamped to one less,
    counted without a CRLF's CR, and the server's text drifted from the client's."""
    assert edited(text, start, end, insert) == expected


def test_positions_and_offsets_agree_over_mixed_line_ends():
    text = "a\r\nb\u2028c\rd\x0ce\n\U0001F600f"
    codec = PositionCodec()
    lines = lsp_lines(text)
    assert lines == ("a\r\n", "b\u2028c\r", "d\x0ce\n", "\U0001F600f")
    for offset, char in enumerate(text):
        if char == "\n" and text[offset - 1] == "\r":
            continue   # inside a line end: no position
        position = position_in_text(text, offset, codec)
        assert offset_in_text(text, position, codec) == offset
        assert position.line == sum(1 for index in line_starts(text) if 0 < index <= offset)


@pytest.mark.parametrize("name, text, edit_at, insert, ask_at", [
    # the typed characters go below a form feed and a U+2028 in a string; ask right after them
    ("inline breakers", '# page one\x0c page two\ns = "a\u2028b"\ndef f(x):\n    return \n', (3, 11), "x +", (3, 14)),
    # a classic-Mac line end in the middle of the file
    ("lone carriage return", "import os\rdef f(x):\n    return \n", (2, 11), "x +", (2, 14)),
    # typed past the end of a CRLF line (a client may send its length plus one): it split the CRLF
    ("past a CRLF line's end", "def f(x):\r\n    return\r\n\r\nprint(1)\r\n", (1, 99), " x +", (1, 14)),
])
def test_the_real_server_completes_where_the_client_typed(tmp_path, tiny_model_dir, name, text, edit_at, insert,
                                                          ask_at):
    client, proc = RawClient.stdio(tmp_path, "--model", str(tiny_model_dir), "--device", "cpu")
    try:
        assert "result" in client.initialize(OPTIONS)
        assert client.wait_loaded()["loaded"]
        uri = "file:///line_ends.py"
        client.open(uri, text)
        start = {"line": edit_at[0], "character": edit_at[1]}
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                                 "contentChanges": [{"range": {"start": start, "end": start},
                                                                     "text": insert}]})
        answer = client.response(client.inline(uri, *ask_at))
        assert "result" in answer, answer          # was InvalidParams: the server's line held other text
        items = answer["result"]["items"]
        assert items, "the tiny model always writes something on this line"
        assert items[0]["range"]["start"] == {"line": ask_at[0], "character": ask_at[1]}
        client.shutdown_and_exit()
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)


@pytest.mark.parametrize("text, character", [("a😀\nb", 2), ("😀", 1), ("x😀y", 2)])
def test_a_position_inside_a_surrogate_pair_says_so_wherever_it_is_on_the_line(text, character):
    """At the line's last character the message once said the position was past the line's end."""
    with pytest.raises(JsonRpcInvalidParams, match="splits a character"):
        offset_in_text(text, types.Position(0, character), PositionCodec())


def test_line_lookups_agree_with_every_line_end_everywhere():
    """line_start / line_of find a line without a Python loop over the file's lines (a Replace All
    of 1,500 places in a 9,000-line file blocked the server 11 s); they must agree with the
    line-end rule on every text, lone CRs included."""
    import bisect
    import random
    import re

    rng = random.Random(7)
    for _ in range(1500):
        text = "".join(rng.choice(["ab", "\n", "\r\n", "\r", "é", "x" * 700, "\n" * 40]) for _ in range(rng.randint(0, 30)))
        starts = [0, *(m.end() for m in re.finditer(r"\r\n|\r|\n", text))]
        for line in {*range(min(len(starts) + 2, 50)), len(starts) - 1, len(starts), len(starts) + 3}:
            assert line_start(text, line) == (starts[line] if line < len(starts) else None), (text, line)
        for offset in rng.sample(range(len(text) + 1), min(len(text) + 1, 40)):
            line = bisect.bisect_right(starts, offset) - 1
            assert line_of(text, offset) == (line, starts[line])

"""Positions in every negotiated encoding (utf-16, utf-8, utf-32) over texts holding lone
surrogates, astral characters and CRLF / CR line ends.

A UTF-16 client (any JavaScript one) sends a lone surrogate as the JSON escape `"\\ud800"`, and an
edit may later put a low surrogate right after a high one: the client then holds one astral
character (2 UTF-16 units, 4 UTF-8 bytes, 1 code point). Kept as two U+FFFD, the server counted
6 bytes and 2 code points there, and every range after it on the line was off for a UTF-8 or
UTF-32 client (positions.py's docstring). The document keeps the client's text (client_text) and
hands the rest of the server its plain text (lone surrogates as U+FFFD, one for one).
"""
from __future__ import annotations

import json
import logging

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.workspace.position_codec import PositionCodec

from dllm_lsp.server.documents import DocumentTrees
from dllm_lsp.server.positions import LspTextDocument, offset_in_text, position_in_text
from dllm_lsp.syntax.snapshot import Snapshot

from .raw_rpc import RawClient, frame
from .test_transport import OPTIONS, stop

ENCODINGS = ["utf-16", "utf-8", "utf-32"]
# what the client counts for a lone surrogate and for an astral character (a pair)
LONE = {"utf-16": 1, "utf-8": 3, "utf-32": 1}
PAIR = {"utf-16": 2, "utf-8": 4, "utf-32": 1}
HIGH, LOW, EMOJI = "\ud83d", "\ude00", "\U0001F600"


def at(line: int, character: int) -> types.Position:
    return types.Position(line=line, character=character)


def partial(start: tuple[int, int], end: tuple[int, int], text: str) -> types.TextDocumentContentChangePartial:
    return types.TextDocumentContentChangePartial(range=types.Range(at(*start), at(*end)), text=text)


def changed(encoding: str, text: str, *changes: types.TextDocumentContentChangePartial,
            trees: DocumentTrees | None = None) -> LspTextDocument:
    """The server's document after `changes` (one didChange), its parsed twin mirrored."""
    document = LspTextDocument("file:///s.py", text, position_codec=PositionCodec(encoding))
    trees = trees or DocumentTrees()
    trees.open("file:///s.py", "python", text)
    for change in changes:
        document.apply_change(change)
    trees.change("file:///s.py", list(changes), document)
    assert trees.text_of("file:///s.py") == document.source        # the twin took the same text
    return document


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_low_surrogate_typed_after_a_high_one_makes_one_character(encoding):
    head = 's = "'
    after_high = (0, len(head) + LONE[encoding])
    document = changed(encoding, f'{head}{HIGH}"; y = 1\n', partial(after_high, after_high, LOW))
    assert document.source == document.client_source == f'{head}{EMOJI}"; y = 1\n'
    # the client's position of `y` lands on `y`, and the server's range of `y` is the client's
    y = document.source.index("y")
    client_y = len(head) + PAIR[encoding] + 3
    assert offset_in_text(document.source, at(0, client_y), document.position_codec) == y
    assert position_in_text(document.source, y, document.position_codec) == at(0, client_y)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_text_typed_after_a_pair_an_edit_made_lands_where_the_client_typed(encoding):
    """Two content changes of one didChange: the pair is made by the first, the second counts
    across it (the parsed twin, which cannot tell a lone surrogate's U+FFFD from U+FFFD, is
    edited over where it differs)."""
    head = 's = "'
    first = partial((0, 5 + LONE[encoding]), (0, 5 + LONE[encoding]), LOW)
    after_y = len(head) + PAIR[encoding] + 4              # `"; y` then the place after it
    document = changed(encoding, f'{head}{HIGH}"; y = 1\n', first, partial((0, after_y), (0, after_y), "z"))
    assert document.source == f'{head}{EMOJI}"; yz = 1\n'


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_deleting_what_lies_between_two_lone_halves_joins_them(encoding):
    text = f"a{HIGH}--{LOW}b\n"
    start = 1 + LONE[encoding]
    document = changed(encoding, text, partial((0, start), (0, start + 2), ""))
    assert document.source == f"a{EMOJI}b\n"
    assert position_in_text(document.source, 2, document.position_codec) == at(0, 1 + PAIR[encoding])


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_halves_sent_in_two_content_changes_and_in_a_whole_document_change(encoding):
    """Halves inserted by two content changes of one didChange are one character; a whole
    document's text is read the same way (a pair is one character, a half alone stays lone)."""
    after_high = (0, LONE[encoding])
    document = changed(encoding, "x = 1\n", partial((0, 0), (0, 0), HIGH), partial(after_high, after_high, LOW))
    assert document.source == f"{EMOJI}x = 1\n"
    document.apply_change(types.TextDocumentContentChangeWholeDocument(text=f"{HIGH}{LOW}{LOW}\n"))
    assert document.source == f"{EMOJI}\ufffd\n" and document.client_source == f"{EMOJI}{LOW}\n"


def test_the_rest_of_the_server_reads_no_lone_surrogate():
    """The parsed twin (tree-sitter, the planner, the tokenizer) holds U+FFFD for a lone
    surrogate, one for one, from didOpen on: no tokenizer takes a lone surrogate."""
    trees = DocumentTrees()
    trees.open("file:///s.py", "python", f's = "{HIGH}"\n')
    assert trees.text_of("file:///s.py") == 's = "\ufffd"\n'
    document = LspTextDocument("file:///s.py", f's = "{HIGH}"\n')
    assert document.source == 's = "\ufffd"\n' and document.client_source == f's = "{HIGH}"\n'


def test_the_parsed_twin_mirrors_a_join_quietly_and_its_tree_is_a_fresh_parse(caplog):
    trees = DocumentTrees()
    text = f'def f():\n    return "{HIGH}" + g(1)\n'
    after_one = len('    return "') + 4 + len('" + g(1')    # bytes, the pair made: 4
    with caplog.at_level(logging.WARNING, logger="dllm_lsp.server.documents"):
        document = changed("utf-8", text, partial((1, 12 + 3), (1, 12 + 3), LOW),
                           partial((1, after_one), (1, after_one), "2"), trees=trees)
    assert document.source == f'def f():\n    return "{EMOJI}" + g(12)\n'
    assert not [r for r in caplog.records if "differs" in r.getMessage()]   # expected here, not a bug
    snapshot = trees.get("file:///s.py", _Workspace(document))[0]
    assert str(snapshot.tree.root_node) == str(Snapshot.parse(document.source, "python").tree.root_node)


class _Workspace:
    """trees.get's workspace argument: only its get_text_document is read."""

    def __init__(self, document: LspTextDocument) -> None:
        self.document = document

    def get_text_document(self, uri: str) -> LspTextDocument:
        return self.document


@pytest.mark.parametrize("encoding, character", [("utf-16", 1 + 1), ("utf-8", 1 + 2)])
def test_a_request_inside_a_character_is_refused_and_a_change_there_goes_after_it(encoding, character):
    """What the project does for a position inside a character (docs/protocol.md): a request
    answers InvalidParams, a didChange lands after the character."""
    codec = PositionCodec(encoding)
    with pytest.raises(JsonRpcInvalidParams, match="splits a character"):
        offset_in_text(f"a{EMOJI}b\n", at(0, character), codec)
    assert changed(encoding, f"a{EMOJI}b\n", partial((0, character), (0, character), "X")).source == f"a{EMOJI}Xb\n"


# --- the real server over stdio, raw frames ---------------------------------------------------

def _escaped(text: str) -> str:
    """`text` as a JSON string literal, surrogates as escapes (json.dumps writes them so)."""
    return json.dumps(text)


@pytest.fixture(scope="module", params=ENCODINGS)
def server(request, tmp_path_factory, tiny_model_dir):
    client, proc = RawClient.stdio(tmp_path_factory.mktemp("pos"), "--model", str(tiny_model_dir), "--device", "cpu")
    try:
        answer = client.initialize(OPTIONS, capabilities={"general": {"positionEncodings": [request.param]}})
        assert answer["result"]["capabilities"]["positionEncoding"] == request.param
        assert client.wait_loaded()["loaded"]
        yield client, request.param
        client.shutdown_and_exit()
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)


def send(client: RawClient, method: str, params: str) -> None:
    client.raw(frame('{"jsonrpc": "2.0", "method": "%s", "params": %s}' % (method, params)))


def open_raw(client: RawClient, uri: str, text: str) -> None:
    send(client, "textDocument/didOpen",
         '{"textDocument": {"uri": "%s", "languageId": "python", "version": 1, "text": %s}}' % (uri, _escaped(text)))


def change_raw(client: RawClient, uri: str, version: int, start: tuple[int, int], end: tuple[int, int],
               text: str) -> None:
    send(client, "textDocument/didChange",
         '{"textDocument": {"uri": "%s", "version": %d}, "contentChanges": [{"range": {"start": {"line": %d, '
         '"character": %d}, "end": {"line": %d, "character": %d}}, "text": %s}]}'
         % (uri, version, *start, *end, _escaped(text)))


def units(text: str, encoding: str) -> int:
    """What the client counts for `text` (a lone surrogate: 1, 3, 1; a pair: 2, 4, 1)."""
    if encoding == "utf-16":
        return len(text.encode("utf-16-le", "surrogatepass")) // 2
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return len(joined) if encoding == "utf-32" else len(joined.encode("utf-8", "surrogatepass"))


def renamed_and_completed(client: RawClient, encoding: str, uri: str, line: str, edit=None) -> None:
    """`def area(width):` then `line` (ending `return width * wid`); width renamed to size: the
    rename's sites and a mid-word completion's range are where the client counts them."""
    open_raw(client, uri, f"def area(width):\n{line}\n")
    version = 2
    if edit is not None:       # (character, text) typed on line 1 first
        change_raw(client, uri, version, (1, edit[0]), (1, edit[0]), edit[1])
        version += 1
        line = line[:edit[2]] + edit[1] + line[edit[2]:]
    answer = client.response(client.inline(uri, 1, units(line, encoding)))
    word = units(line[:line.rindex("wid")], encoding)
    items = answer["result"]["items"]
    assert items, "the tiny model writes something after `wid`"
    assert items[0]["range"] == {"start": {"line": 1, "character": word},
                                 "end": {"line": 1, "character": units(line, encoding)}}
    change_raw(client, uri, version, (0, 9), (0, 14), "size")
    result = client.call("dllm/nextEdits", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 13}})
    first = units(line[:line.index("width")], encoding)
    assert [e["range"] for e in result["result"]["edits"]][:1] == [
        {"start": {"line": 1, "character": first}, "end": {"line": 1, "character": first + 5}}]


@pytest.mark.parametrize("name, line", [
    ("lone surrogate", f'    s = "{HIGH}"; return width * wid'),
    ("lone low then high", f'    s = "{LOW}{HIGH}"; return width * wid'),
    ("astral", f'    s = "{EMOJI}é"; return width * wid'),
])
def test_the_real_server_counts_as_the_client_does(server, name, line):
    client, encoding = server
    renamed_and_completed(client, encoding, f"file:///{name.replace(' ', '_')}.py", line)


@pytest.mark.parametrize("end", ["\r\n", "\r"])
def test_the_real_server_over_crlf_and_cr_line_ends(server, end):
    client, encoding = server
    uri = f"file:///ends{len(end)}.py"
    line = f'    s = "{EMOJI}{HIGH}"; return width * wid'
    open_raw(client, uri, f"def area(width):{end}{line}{end}x = 1{end}")
    change_raw(client, uri, 2, (0, 9), (0, 14), "size")
    result = client.call("dllm/nextEdits", {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 13}})
    first = units(line[:line.index("width")], encoding)
    assert [e["range"] for e in result["result"]["edits"]][:1] == [
        {"start": {"line": 1, "character": first}, "end": {"line": 1, "character": first + 5}}]


def test_the_real_server_counts_a_pair_an_edit_made_as_the_client_does(server):
    # The transport keeps lone surrogates in document texts: as U+FFFD, the pair an edit makes
    # was two characters (6 UTF-8 bytes, 2 code points where the client has 4 and 1).
    client, encoding = server
    line = f'    s = "{HIGH}{LOW}"; return width * wid'
    opened = line.replace(LOW, "")
    typed_at = units(opened[:opened.index(HIGH) + 1], encoding)
    renamed_and_completed(client, encoding, "file:///made_pair.py", opened,
                          edit=(typed_at, LOW, opened.index(HIGH) + 1))

"""Streamed refinements (`dllm/inlineCompletion` with a partialResultToken) through the real server
(stdio) while the editor goes on: each report fits the version it is sent after, or is not sent;
nothing is reported after the request's answer, however it ends; the server stays up."""
from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from lsprotocol import types

from dllm_lsp.bench.typing import plain

from .lsp_harness import inline_params, open_doc, raw_inline_params, start_server, stop_server, wait_loaded

SOURCE = "import os\n\n\ndef area(width, height):\n    return \n\n\nprint(area(2, 3))\n"
LINE, COL = 4, 11
# Slow enough that a stream is still denoising when the edit of a test arrives: one token a step,
# every step reported.
SLOW = {"steps": 128, "threshold": 1.0, "maxLineTokens": 64, "streamIntervalMs": 0}
pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory, tiny_model_dir):
    client, seen, _ = await start_server(tmp_path_factory.mktemp("stream"),
                                         {"model": str(tiny_model_dir), "device": "cpu", "companionEdits": False,
                                          **SLOW})
    assert (await wait_loaded(client))["loaded"]
    yield client, seen
    await stop_server(client)


async def status(client) -> dict:
    return plain(await client.protocol.send_request_async("dllm/status", {}))


def change(client, uri: str, version: int, *edits: tuple[int, int, int, int, str]) -> None:
    """One didChange of `edits` (line, col, end line, end col, text), applied in order (as an
    editor with several cursors sends them)."""
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, col), types.Position(end_line, end_col)), text=text)
            for line, col, end_line, end_col, text in edits]))


class Stream:
    """A streamed request and the reports of its token, with how many had come when it was answered."""

    def __init__(self, client, seen, uri: str, token: str, line: int = LINE, col: int = COL) -> None:
        self.seen, self.token = seen, token
        self.msg_id = f"stream-{token}"
        self.answered_at: int | None = None
        params = {**raw_inline_params(uri, line, col), "partialResultToken": token}
        self.future = client.protocol.send_request("dllm/inlineCompletion", params, msg_id=self.msg_id)
        # run by the client as it reads the answer: the reports read before it are counted then
        self.future.add_done_callback(lambda _: setattr(self, "answered_at", len(self.seen.progress)))

    @property
    def reports(self) -> list[dict]:
        return [p.value for p in self.seen.progress if p.token == self.token]

    def reports_from(self, index: int) -> list[dict]:
        return [p.value for p in self.seen.progress[index:] if p.token == self.token]

    async def first_report(self) -> None:
        while not self.reports and not self.future.done():
            await asyncio.sleep(0.001)

    async def answer(self):
        return plain(await asyncio.wait_for(asyncio.wrap_future(self.future), 120))


async def test_reports_after_a_line_added_above_are_ranged_a_line_lower(server):
    """The user presses Enter above while the model denoises: the answer moved a line down
    (rebase), and the reports sent after the edit stayed ranged on the line above the cursor."""
    client, seen = server
    uri = "file:///stream/above.py"
    open_doc(client, uri, SOURCE)
    stream = Stream(client, seen, uri, "above")
    await stream.first_report()
    change(client, uri, 2, (0, 0, 0, 0, "# c\n"))
    await status(client)                     # the edit is applied: every report read from now came after it
    after = len(seen.progress)
    answer = await stream.answer()
    later = [r for r in stream.reports_from(after) if r["kind"] == "report"]
    assert later, "the stream ended before the edit: too fast to probe"
    assert {(r["range"]["start"]["line"], r["range"]["end"]["line"]) for r in later} == {(LINE + 1, LINE + 1)}
    assert answer["items"] and answer["items"][0]["range"]["start"]["line"] == LINE + 1


async def test_reports_after_a_backspace_before_the_cursor_are_not_sent(server):
    """The blank before the cursor deleted mid-stream: the answer is dropped (it no longer fits),
    and so is every report sent after the edit (they showed the refinement over the old range)."""
    client, seen = server
    uri = "file:///stream/backspace.py"
    open_doc(client, uri, SOURCE)
    before = await status(client)
    stream = Stream(client, seen, uri, "backspace")
    await stream.first_report()
    change(client, uri, 2, (LINE, COL - 1, LINE, COL, ""))
    await status(client)
    after = len(seen.progress)
    answer = await stream.answer()
    assert not answer["items"]
    assert not [r for r in stream.reports_from(after) if r["kind"] == "report"]
    assert (await status(client))["dropped"] == before["dropped"] + 1


async def test_reports_after_typing_through_the_refinement_cover_what_was_typed(server):
    """The user types the first character the refinement shows: later reports go on over the
    longer typed part (as the answer does), only those that still begin with it."""
    client, seen = server
    uri = "file:///stream/typed.py"
    open_doc(client, uri, SOURCE)
    stream = Stream(client, seen, uri, "typed")
    await stream.first_report()
    first = stream.reports[0]["text"]
    assert first, stream.reports
    change(client, uri, 2, (LINE, COL, LINE, COL, first[0]))
    await status(client)
    after = len(seen.progress)
    await stream.answer()
    later = [r for r in stream.reports_from(after) if r["kind"] == "report"]
    for report in later:
        assert report["text"].startswith(first[0])
        assert (report["range"]["start"]["character"], report["range"]["end"]["character"]) == (COL, COL + 1)


async def test_typing_at_the_cursor_and_below_at_once_does_not_leave_the_answer_behind(server):
    """Two cursors (the completion's and one further down) type the same character: one didChange,
    which a text diff reads as one replacement from the cursor on. It was taken for an edit after
    the completion, which was answered at the old cursor, before the character just typed."""
    client, seen = server
    uri = "file:///stream/cursors.py"
    open_doc(client, uri, SOURCE)
    stream = Stream(client, seen, uri, "cursors")
    await stream.first_report()
    first = stream.reports[0]["text"]
    typed = "~" if not first.startswith("~") else "^"        # not the refinement's next character
    change(client, uri, 2, (LINE, COL, LINE, COL, typed), (7, 0, 7, 0, typed))
    await status(client)
    after = len(seen.progress)
    answer = await stream.answer()
    assert not answer["items"], answer      # no place fits it exactly: the cursor is past the `~`
    assert not [r for r in stream.reports_from(after) if r["kind"] == "report"]


@pytest.mark.parametrize("when", ["before the first report", "between reports", "after the last report"])
async def test_a_cancelled_stream_reports_nothing_after_its_answer(server, when):
    client, seen = server
    uri = f"file:///stream/cancel-{when.split()[0]}.py"
    open_doc(client, uri, SOURCE)
    stream = Stream(client, seen, uri, f"cancel-{when.split()[0]}")
    if when == "between reports":
        await stream.first_report()
    elif when == "after the last report":
        while not any(r.get("maskedLeft") == 0 for r in stream.reports) and not stream.future.done():
            await asyncio.sleep(0.001)
    client.protocol.notify("$/cancelRequest", {"id": stream.msg_id})
    try:
        await stream.answer()
    except Exception as exc:               # cancelled in time: RequestCancelled
        assert getattr(exc, "code", None) == -32800, exc
    await status(client)                   # anything the server sent after its answer has come by now
    assert stream.answered_at is not None
    assert stream.reports_from(stream.answered_at) == []
    # the server is up and the document's requests are free: the next stream answers
    again = Stream(client, seen, uri, f"again-{when.split()[0]}")
    assert (await again.answer())["items"] is not None


async def test_closing_the_document_mid_stream_ends_it_with_nothing_after(server):
    client, seen = server
    uri = "file:///stream/closed.py"
    open_doc(client, uri, SOURCE)
    stream = Stream(client, seen, uri, "closed")
    await stream.first_report()
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri)))
    with pytest.raises(Exception, match="the document was closed"):
        await stream.answer()
    await status(client)
    assert stream.reports_from(stream.answered_at) == []


async def test_a_plain_request_and_a_stream_of_one_keystroke_answer_the_same_place(server):
    """The plain request of the same keystroke (VS Code sends both) does not supersede the stream,
    nor the stream the plain one, and an edit meanwhile moves both the same way."""
    client, seen = server
    uri = "file:///stream/both.py"
    open_doc(client, uri, SOURCE)
    stream = Stream(client, seen, uri, "both")
    plain_request = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(uri, LINE, COL)))
    await stream.first_report()
    change(client, uri, 2, (0, 0, 0, 0, "# c\n"))
    streamed, plain_answer = await stream.answer(), await asyncio.wait_for(plain_request, 120)
    assert [i["range"]["start"]["line"] for i in streamed["items"]] == \
        [i.range.start.line for i in plain_answer.items]

"""The body of a block between braces on one line (`function f() {‸ }`, `int f() {‸}`), through
the real server over stdio with the tiny random model:

- its streamed reports (`dllm/inlineCompletion`'s $/progress) are laid out as the answer is, the
  body on lines of its own below the `{` and the `}` pushed to one below it: they carried the
  model's raw text glued to the `{` (`mpmp`), which the editor drew there while it streamed and a
  Tab pressed meanwhile inserted there;
- its answer, whose range ends after the cursor (the blank before a column-0 `}`), is typed
  through and moved over what was typed as any other: rebase took the range's end for the cursor,
  so typing at the cursor dropped it, and the model ran again at every character typed."""
from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from lsprotocol import converters, types

from dllm_lsp.bench.typing import plain

from .lsp_harness import inline_params, open_doc, raw_inline_params, start_server, stop_server, wait_loaded

# One token a step, every step reported: a stream long enough for an edit to land while it runs
# (as tests/server/test_s33_stream_edits.py).
SLOW = {"steps": 128, "threshold": 1.0, "maxLineTokens": 64, "streamIntervalMs": 0}
pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]

# A function above with a body two blanks deep: the file's own step, which the body takes
JS = "function g() {\n  return 2;\n}\nfunction f() { }\n"
JS_LINE, JS_COL = 3, len("function f() {")

# (language, text, line, column after the `{`, the body's indentation, what follows its last line)
BODIES = [
    ("javascript", JS, JS_LINE, JS_COL, "  ", "\n"),                      # `{ }` at column 0: replaces the blank
    ("c", "int f() {}\n", 0, len("int f() {"), "    ", "\n"),
    ("rust", "fn f() { }\n", 0, len("fn f() {"), "    ", "\n"),
    ("go", "func f() {\n\tif x { }\n}\n", 1, len("\tif x {"), "\t\t", "\n\t"),  # `}` back under the `if`
]
EXTENSIONS = {"javascript": "js", "c": "c", "rust": "rs", "go": "go"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory, tiny_model_dir):
    client, seen, _ = await start_server(tmp_path_factory.mktemp("s34-stream"),
                                         {"model": str(tiny_model_dir), "device": "cpu", "companionEdits": False,
                                          **SLOW})
    assert (await wait_loaded(client))["loaded"]
    yield client, seen
    await stop_server(client)


async def status(client) -> dict:
    return plain(await client.protocol.send_request_async("dllm/status", {}))


def insert(client, uri: str, version: int, line: int, col: int, text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, col), types.Position(line, col)), text=text)]))


def offset(text: str, line: int, col: int) -> int:
    return sum(len(row) + 1 for row in text.split("\n")[:line]) + col


def applied(text: str, item: dict) -> str:
    """`text` with the answer's item applied over its range."""
    rng = item["range"]
    return (text[:offset(text, rng["start"]["line"], rng["start"]["character"])] + item["insertText"]
            + text[offset(text, rng["end"]["line"], rng["end"]["character"]):])


class Stream:
    def __init__(self, client, seen, uri: str, token: str, line: int, col: int) -> None:
        self.seen, self.token = seen, token
        params = {**raw_inline_params(uri, line, col), "partialResultToken": token}
        self.future = client.protocol.send_request("dllm/inlineCompletion", params)

    def reports(self, since: int = 0) -> list[dict]:
        return [plain(p.value) for p in self.seen.progress[since:]
                if p.token == self.token and plain(p.value)["kind"] == "report"]

    async def first_text(self) -> str:
        """The first report with some text decided."""
        while not self.future.done():
            texts = [r["text"] for r in self.reports() if r["text"]]
            if texts:
                return texts[0]
            await asyncio.sleep(0.001)
        raise AssertionError("the stream ended before any report with text: too fast to probe")

    async def answer(self) -> dict:
        return plain(await asyncio.wait_for(asyncio.wrap_future(self.future), 120))


@pytest.mark.parametrize("language,text,line,col,indent,tail", BODIES, ids=[b[0] for b in BODIES])
async def test_streamed_reports_of_a_brace_body_are_laid_out_as_the_answer_is(server, language, text, line,
                                                                            col, indent, tail):
    client, seen = server
    uri = f"file:///s34/laid-out.{EXTENSIONS[language]}"
    open_doc(client, uri, text, language)
    stream = Stream(client, seen, uri, f"laid-out-{language}", line, col)
    answer = await stream.answer()
    reports = [r for r in stream.reports() if r["text"]]
    assert reports, stream.reports()
    for report in reports:
        body = report["text"]
        # the body below the `{`, one step in, and what follows it as the answer has it (the `}`
        # on a line of its own): not the model's text glued to the `{`
        assert body.startswith("\n" + indent) and body[len("\n" + indent)] not in " \t", report
        assert body.endswith(tail) and body.count("\n") >= 2, report
        start, end = report["range"]["start"], report["range"]["end"]
        assert (start["line"], start["character"]) == (line, col), report
        assert end["line"] == line and end["character"] == col + (language in ("javascript", "rust", "go")), report
    last = reports[-1]
    assert last["maskedLeft"] == 0, last
    if answer["items"]:       # (the answer refuses what does not parse: the tiny model's C)
        # the last report shows what the answer inserts, over the same range
        assert answer["items"][0]["insertText"] == last["text"], (answer, last)
        assert answer["items"][0]["range"] == last["range"]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
async def test_a_brace_body_typed_through_is_answered_from_the_suggestion(server, streamed):
    """Enter, then the body's blanks, typed as the suggestion goes on: each next request is
    answered from it, without the model, over the longer typed part and the blank still before
    the `}`; accepting it then leaves the file as accepting it at first would have."""
    client, seen = server
    uri = f"file:///s34/typed-{streamed}.js"
    open_doc(client, uri, JS, "javascript")

    async def ask(token: str, line: int, col: int) -> dict:
        if streamed:
            return await Stream(client, seen, uri, token, line, col).answer()
        request = client.text_document_inline_completion_async(inline_params(uri, line, col))
        answer = await asyncio.wait_for(request, 120)
        return converters.get_converter().unstructure(answer)

    first = await ask(f"first-{streamed}", JS_LINE, JS_COL)
    assert first["items"], first
    item = first["items"][0]
    text = item["insertText"]
    assert text.startswith("\n  ") and text.endswith("\n"), item      # laid out by post-processing
    assert item["range"]["end"] == {"line": JS_LINE, "character": JS_COL + 1}, item   # and the blank after
    accepted = applied(JS, item)

    document, version = JS, 1
    for typed, line, col in [("\n", JS_LINE + 1, 0), ("  ", JS_LINE + 1, 2)]:
        before = await status(client)
        version += 1
        insert(client, uri, version, *((JS_LINE, JS_COL) if typed == "\n" else (JS_LINE + 1, 0)), typed)
        cursor = offset(document, *((JS_LINE, JS_COL) if typed == "\n" else (JS_LINE + 1, 0)))
        document = document[:cursor] + typed + document[cursor:]
        again = await ask(f"again-{streamed}-{version}", line, col)
        after = await status(client)
        assert after["typedThroughHits"] == before["typedThroughHits"] + 1, (after, again)
        assert after["batching"]["requestSteps"] == before["batching"]["requestSteps"]   # no model step
        assert len(again["items"]) == 1, again
        moved = again["items"][0]
        assert moved["insertText"] == text
        # from the `{` on, over what was typed and the blank before the `}`, which is still there
        assert moved["range"] == {"start": {"line": JS_LINE, "character": JS_COL},
                                  "end": {"line": line, "character": col + 1}}, moved
        assert applied(document, moved) == accepted


async def test_a_brace_body_typed_through_while_it_streams_is_moved_over_what_was_typed(server):
    """Enter pressed at the cursor while the body streams (its reports begin with the line break
    now): the reports after it and the answer go on over the longer typed part."""
    client, seen = server
    uri = "file:///s34/while-streaming.js"
    open_doc(client, uri, JS, "javascript")
    before = await status(client)
    stream = Stream(client, seen, uri, "while-streaming", JS_LINE, JS_COL)
    first = await stream.first_text()
    assert first.startswith("\n"), first
    insert(client, uri, 2, JS_LINE, JS_COL, "\n")
    await status(client)                     # the edit is applied: every report read from now came after it
    since = len(seen.progress)
    answer = await stream.answer()
    after = await status(client)
    assert after["dropped"] == before["dropped"], after          # it fits: moved, not dropped
    assert answer["items"], answer
    moved_range = {"start": {"line": JS_LINE, "character": JS_COL}, "end": {"line": JS_LINE + 1, "character": 1}}
    assert answer["items"][0]["range"] != {"start": {"line": JS_LINE, "character": JS_COL},
                                           "end": {"line": JS_LINE, "character": JS_COL + 1}}, \
        "the stream ended before the edit: too fast to probe"
    assert answer["items"][0]["range"] == moved_range
    assert after["rebased"] == before["rebased"] + 1
    later = stream.reports(since)
    assert later, stream.reports()           # reports went on after the edit, moved as the answer is
    for report in later:
        assert report["text"].startswith("\n  "), report
        assert report["range"] == moved_range, report
    assert answer["items"][0]["insertText"] == later[-1]["text"]

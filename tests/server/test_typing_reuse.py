"""Typing through the real server (stdio): a suggestion typed through is reused without a model
call, an accepted one starts the next completion ahead of its request, and an edit that arrives
while the model denoises moves the result (when exact) or drops it (never shown misplaced)."""
from __future__ import annotations

import asyncio
import contextlib

import pytest
import pytest_asyncio
from lsprotocol import types

from dllm_lsp.bench.typing import plain

from .lsp_harness import inline_params, open_doc, raw_inline_params, start_server, stop_server, wait_loaded

SOURCE = "import os\n\n\ndef area(width, height):\n    return \n\n\nprint(area(2, 3))\n"
LINE, COL = 4, 11
pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(tmp_path_factory, tiny_model_dir):
    client, _, _ = await start_server(tmp_path_factory.mktemp("typing"),
                                      {"model": str(tiny_model_dir), "device": "cpu", "companionEdits": False})
    assert (await wait_loaded(client))["loaded"]
    yield client
    await stop_server(client)


def change(client, uri: str, version: int, line: int, col: int, end_col: int, text: str,
           end_line: int | None = None) -> None:
    end = types.Position(line if end_line is None else end_line, end_col)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, col), end), text=text)]))


async def status(client) -> dict:
    return plain(await client.protocol.send_request_async("dllm/status", {}))


async def suggest(client, uri: str, line: int, col: int):
    answer = await client.text_document_inline_completion_async(inline_params(uri, line, col))
    return answer.items[0] if answer.items else None


async def test_typing_through_a_suggestion_reuses_it_without_the_model(client):
    uri = "file:///typing/through.py"
    open_doc(client, uri, SOURCE)
    first = await suggest(client, uri, LINE, COL)
    assert first is not None and len(first.insert_text) >= 3, first
    before = await status(client)
    text = first.insert_text
    change(client, uri, 2, LINE, COL, COL, text[0])          # the user types the suggestion's first char
    again = await suggest(client, uri, LINE, COL + 1)
    after = await status(client)
    assert again.insert_text == text
    assert (again.range.start.character, again.range.end.character) == (COL, COL + 1)
    assert after["typedThroughHits"] == before["typedThroughHits"] + 1
    assert after["batching"]["requestSteps"] == before["batching"]["requestSteps"]   # no model step ran
    change(client, uri, 3, LINE, COL + 1, COL + 1, "#")       # typing departs from it: the model runs again
    await suggest(client, uri, LINE, COL + 2)
    assert (await status(client))["batching"]["requestSteps"] > after["batching"]["requestSteps"]


async def test_a_classic_completion_typed_through_filters_on_what_is_typed_now(client):
    """Editors filter a completion item by the text its range covers against its filterText. An
    answer reused after typing kept the older version's typed word as filterText (`wid` for a
    range over `widt`), so classic clients hid it at the first keystroke that agreed with it."""
    uri = "file:///typing/filtered.py"
    source = SOURCE.replace("    return \n", "    return wid\n")
    open_doc(client, uri, source)
    line_text = source.split("\n")[LINE]
    params = lambda col: types.CompletionParams(text_document=types.TextDocumentIdentifier(uri),
                                                 position=types.Position(LINE, col))
    first = (await client.text_document_completion_async(params(COL + 3))).items
    assert first and first[0].filter_text == "wid", first
    text = first[0].text_edit.new_text
    assert text.startswith("wid") and len(text) >= 5, text
    before = await status(client)
    change(client, uri, 2, LINE, COL + 3, COL + 3, text[3])           # typed through: the next character
    again = (await client.text_document_completion_async(params(COL + 4))).items
    assert (await status(client))["typedThroughHits"] == before["typedThroughHits"] + 1
    covered = (line_text + text[3])[again[0].text_edit.range.start.character:again[0].text_edit.range.end.character]
    assert covered == text[:4] and again[0].filter_text == covered


async def test_an_accepted_suggestion_starts_the_next_completion_ahead(client):
    uri = "file:///typing/accept.py"
    open_doc(client, uri, SOURCE)
    first = await suggest(client, uri, LINE, COL)
    assert first is not None
    before = await status(client)
    r = first.range
    change(client, uri, 2, r.start.line, r.start.character, r.end.character, first.insert_text)   # accept
    assert "\n" not in first.insert_text
    await suggest(client, uri, LINE, r.start.character + len(first.insert_text))
    after = await status(client)
    assert after["prefetchStarted"] == before["prefetchStarted"] + 1
    assert after["prefetchHits"] == before["prefetchHits"] + 1


SLOW = [{"steps": 64, "threshold": 1.0, "maxLineTokens": n} for n in (64, 48, 40, 56)]


async def slow_settings_that_show_something(client, uri: str, source: str = SOURCE) -> dict:
    """Slow decode settings under which the tiny random model's line at `uri` is shown (not every
    gibberish line parses). The document is left open, as it was probed: the same text, the same
    other documents, the same cached context, so the real request computes the same line."""
    for settings in SLOW:
        client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"dllm": settings}))
        open_doc(client, uri, source)
        found = await suggest(client, uri, LINE, COL)
        client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri)))
        if found is not None:
            open_doc(client, uri, source)
            return settings
    raise AssertionError("no slow setting shows a completion")


@contextlib.asynccontextmanager
async def denoising(client, uri: str, source: str = SOURCE):
    """A request at LINE:COL of `uri` still denoising (slow settings under which its line is
    shown), for an edit to arrive meanwhile; the usual settings again afterwards."""
    try:
        await slow_settings_that_show_something(client, uri, source)
        pending = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(uri, LINE, COL)))
        await asyncio.sleep(0.01)
        yield pending
    finally:
        usual_settings(client)


def usual_settings(client) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"dllm": {"steps": 8, "threshold": 0.9, "maxLineTokens": 32}}))


async def test_an_edit_during_denoising_moves_the_result_or_drops_it(client):
    before = await status(client)
    async with denoising(client, "file:///typing/moved.py") as pending:
        change(client, "file:///typing/moved.py", 2, 0, 0, 0, "# a comment\n")   # a line above: the result moves down
        moved = (await pending).items
    middle = await status(client)
    assert moved and moved[0].range.start.line == LINE + 1, middle
    assert middle["rebased"] == before["rebased"] + 1
    async with denoising(client, "file:///typing/dropped.py") as pending:
        change(client, "file:///typing/dropped.py", 2, LINE, 10, 0, ";", end_line=LINE + 1)   # an edit across the cursor
        assert not (await pending).items
    assert (await status(client))["dropped"] == middle["dropped"] + 1


async def test_enter_typed_during_denoising_never_leaves_the_result_a_line_above(client):
    """Enter and an auto-indent typed at the cursor while the model runs, before a line that starts
    with that same indent: a text diff alone places the insertion after the cursor, which kept the
    line's suggestion at the old cursor, a line above the user's. It is typing at the cursor that
    departs from the suggestion (a one-line suggestion has no line break): dropped."""
    uri = "file:///typing/enter.py"
    before = await status(client)
    async with denoising(client, uri, SOURCE.replace("    return \n", "    return \n    pass\n")) as pending:
        change(client, uri, 2, LINE, COL, COL, "\n    ")
        assert not (await pending).items
    assert (await status(client))["dropped"] == before["dropped"] + 1


async def test_a_backspace_before_the_cursor_during_denoising_drops_the_result(client):
    """`return ‸` and the blank deleted while the model ran: the result was moved one character
    left and accepting it wrote `returnnp.dtype(x)`."""
    uri = "file:///typing/backspace.py"
    before = await status(client)
    async with denoising(client, uri) as pending:
        change(client, uri, 2, LINE, COL - 1, COL, "")
        assert not (await pending).items
    assert (await status(client))["dropped"] == before["dropped"] + 1


async def test_closing_the_document_during_denoising_stops_its_request(client):
    """A closed document's request stopped costing steps only when it ended: it ran on to its
    last step, and a reopened document of other text could then get it."""
    uri = "file:///typing/closed.py"
    async with denoising(client, uri) as pending:
        client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri)))
        with pytest.raises(Exception, match="the document was closed"):
            await pending


async def test_a_streamed_and_a_plain_request_for_one_document_both_finish(client):
    """An editor that draws native inline completions and streams refinements sends both for the
    same keystroke: neither supersedes the other (only a newer request of the same kind does)."""
    uri = "file:///typing/both.py"
    open_doc(client, uri, SOURCE)
    streamed = client.protocol.send_request(
        "dllm/inlineCompletion", {**raw_inline_params(uri, LINE, COL), "partialResultToken": "both-1"})
    plain = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(uri, LINE, COL)))
    first = await asyncio.wait_for(asyncio.wrap_future(streamed), 60)
    second = await asyncio.wait_for(plain, 60)
    assert first is not None and second is not None     # neither answered RequestCancelled


async def test_a_keystroke_answered_from_the_suggestion_cancels_the_older_request(client):
    # A typo (the model runs for it), Backspace, the suggestion's next character: answered from
    # the suggestion, while the typo's request went on and later answered, erasing the suggestion.
    uri = "file:///typing/typo.py"
    try:
        await slow_settings_that_show_something(client, uri)
        first = await suggest(client, uri, LINE, COL)
        assert first is not None
        change(client, uri, 2, LINE, COL, COL, "~" if first.insert_text[0] != "~" else "^")       # the typo
        typo = asyncio.ensure_future(client.text_document_inline_completion_async(inline_params(uri, LINE, COL + 1)))
        await asyncio.sleep(0.01)
        change(client, uri, 3, LINE, COL, COL + 1, "")                                              # Backspace
        change(client, uri, 4, LINE, COL, COL, first.insert_text[0])
        before = await status(client)
        again = await suggest(client, uri, LINE, COL + 1)
        assert again is not None and again.insert_text == first.insert_text
        assert (await status(client))["typedThroughHits"] == before["typedThroughHits"] + 1
        with pytest.raises(Exception) as older:
            await asyncio.wait_for(typo, 120)
        assert getattr(older.value, "code", None) == -32800
    finally:
        usual_settings(client)


async def test_a_settings_change_ends_reuse_of_what_was_computed_before_it(client):
    uri = "file:///typing/settings.py"
    open_doc(client, uri, SOURCE)
    first = await suggest(client, uri, LINE, COL)
    assert first is not None and len(first.insert_text) >= 2
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"dllm": {"maxLineTokens": 31}}))
    before = await status(client)
    change(client, uri, 2, LINE, COL, COL, first.insert_text[0])
    await suggest(client, uri, LINE, COL + 1)
    assert (await status(client))["typedThroughHits"] == before["typedThroughHits"]
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"dllm": {"maxLineTokens": 32}}))


async def test_a_request_for_another_spelling_of_the_document_is_the_same_document(client):
    # `My%20Project` and `My Project` were one document to the store, two to the completions:
    # a didClose in one spelling did not stop a request in the other.
    encoded, plain_uri = "file:///typing/My%20Project/a.py", "file:///typing/My Project/a.py"
    async with denoising(client, encoded) as pending:
        client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(plain_uri)))
        with pytest.raises(Exception) as closed:
            await asyncio.wait_for(pending, 120)
        assert getattr(closed.value, "code", None) == -32800 and "closed" in str(closed.value)


async def test_a_streamed_request_after_an_accept_takes_the_prefetched_run(client):
    # An editor that streams never used the prefetch: every accept cost a second model run.
    uri = "file:///typing/accept-streamed.py"
    open_doc(client, uri, SOURCE)
    first = await suggest(client, uri, LINE, COL)
    assert first is not None and "\n" not in first.insert_text
    before = await status(client)
    r = first.range
    change(client, uri, 2, r.start.line, r.start.character, r.end.character, first.insert_text)   # accept
    params = {**raw_inline_params(uri, LINE, r.start.character + len(first.insert_text)), "partialResultToken": "acc"}
    await client.protocol.send_request_async("dllm/inlineCompletion", params)
    after = await status(client)
    assert after["prefetchStarted"] == before["prefetchStarted"] + 1
    assert after["prefetchHits"] == before["prefetchHits"] + 1

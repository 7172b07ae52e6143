"""The real server over stdio, driven by pygls' LanguageClient."""
from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from .lsp_harness import (
    inline_params, open_doc, raw_inline_params, send_raw_request, start_server, stop_server, wait_loaded,
    wait_until,
)

URI = "file:///tmp/example.py"
SOURCE = "import os\n\n\ndef area(width, height):\n    return \n\n\nprint(area(2, 3))\n"
DEFAULTS = {"steps": 16, "threshold": 0.9, "maxSpanTokens": 64, "maxLineTokens": 32, "languages": {},
            "streamIntervalMs": 50, "confidence": "prob", "remaskBelow": None, "companionEdits": False,
            "alternatives": 1, "minConfidence": None}

# One server for the module (starting one costs seconds on a busy 2-core machine); every test
# starts from the default options. Tests that need their own server start it themselves.
pytestmark = [pytest.mark.timeout(300), pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_server(tmp_path_factory, tiny_model_dir):
    client, seen, result = await start_server(
        tmp_path_factory.mktemp("server"), {"model": str(tiny_model_dir), "device": "cpu"}
    )
    status = await wait_loaded(client)
    assert status["loaded"], status
    yield client, seen, result
    await stop_server(client)


@pytest_asyncio.fixture(loop_scope="module")
async def server(shared_server):
    client = shared_server[0]
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"dllm": DEFAULTS}))
    yield shared_server


async def test_initialize_advertises_capabilities(server):
    _, _, result = server
    caps = result.capabilities
    assert caps.inline_completion_provider is not None and caps.inline_completion_provider is not False
    assert caps.completion_provider is not None
    sync = caps.text_document_sync
    assert sync.change == types.TextDocumentSyncKind.Incremental
    assert result.server_info.name == "dllm-lsp"


async def test_model_load_is_reported_as_work_done_progress(server):
    client, seen, _ = server
    await wait_until(lambda: any(p.value["kind"] == "end" for p in seen.progress))
    kinds = [p.value["kind"] for p in seen.progress if p.token in seen.created_tokens]
    assert kinds[0] == "begin" and kinds[-1] == "end"


async def test_inline_completion_round_trip_is_deterministic(server):
    client, _, _ = server
    open_doc(client, URI, SOURCE)
    first = await client.text_document_inline_completion_async(inline_params(URI, 4, 11))
    second = await client.text_document_inline_completion_async(inline_params(URI, 4, 11))
    assert len(first.items) == 1
    item = first.items[0]
    assert item.insert_text and "\n" not in item.insert_text   # a line tail stays on its line
    assert item.range.start == types.Position(line=4, character=11)
    assert second.items[0].insert_text == item.insert_text


async def test_classic_completion_carries_a_text_edit(server):
    client, _, _ = server
    open_doc(client, URI, SOURCE)
    result = await client.text_document_completion_async(
        types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=URI),
                               position=types.Position(line=4, character=11))
    )
    assert result.items, "one completion item expected"
    edit = result.items[0].text_edit
    assert edit.new_text and edit.range.start == types.Position(line=4, character=11)


async def test_alternatives_are_offered_after_the_greedy_completion(server):
    client, _, _ = server
    open_doc(client, URI, SOURCE)
    alone = await client.text_document_inline_completion_async(inline_params(URI, 4, 11))
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"dllm": {"alternatives": 8}}))
    several = await client.text_document_inline_completion_async(inline_params(URI, 4, 11))
    texts = [item.insert_text for item in several.items]
    assert texts[0] == alone.items[0].insert_text and len(texts) > 1 and len(set(texts)) == len(texts)
    assert all(item.range == several.items[0].range for item in several.items)
    classic = await client.text_document_completion_async(
        types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=URI),
                               position=types.Position(line=4, character=11)))
    assert [item.text_edit.new_text for item in classic.items] == texts
    assert [item.sort_text for item in classic.items] == [str(rank) for rank in range(len(texts))]


async def test_incremental_changes_are_applied(server):
    client, _, _ = server
    open_doc(client, URI, "x = 1\n")
    with pytest.raises(JsonRpcException):   # line 2 does not exist yet
        await client.text_document_inline_completion_async(inline_params(URI, 2, 4))
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(start=types.Position(line=1, character=0), end=types.Position(line=1, character=0)),
                text="def f():\n    y = ",
            )],
        )
    )
    result = await client.text_document_inline_completion_async(inline_params(URI, 2, 8))
    assert result.items and result.items[0].range.start == types.Position(line=2, character=8)


async def test_unknown_language_falls_back_to_line_rules(server):
    client, _, _ = server
    uri = "file:///tmp/notes.cobol"
    open_doc(client, uri, "MOVE A TO \n", language="cobol")
    result = await client.text_document_inline_completion_async(inline_params(uri, 0, 10))
    assert result.items and result.items[0].insert_text


@pytest.mark.parametrize(
    "line, character, why",
    [(-1, 0, "negative line"), (0, -3, "negative character"), (99, 0, "line past the end"),
     (0, 500, "character past the end of the line")],
)
async def test_out_of_range_positions_get_an_error(server, line, character, why):
    client, _, _ = server
    open_doc(client, URI, SOURCE)
    with pytest.raises(JsonRpcException) as info:
        await send_raw_request(client, "textDocument/inlineCompletion", raw_inline_params(URI, line, character))
    assert info.value.code in (-32602, -32603), why
    status = await client.protocol.send_request_async("dllm/status", {})
    assert status.loaded   # still alive and serving


async def test_document_never_opened_gets_invalid_params(server):
    client, _, _ = server
    with pytest.raises(JsonRpcException) as info:
        await client.text_document_inline_completion_async(inline_params("file:///never/opened.py", 0, 0))
    assert info.value.code == -32602
    assert "not open" in str(info.value)


@pytest.mark.parametrize("params", [{}, {"textDocument": {"uri": URI}}, {"position": {"line": 0, "character": 0}}, None])
async def test_missing_params_get_an_error(server, params):
    client, _, _ = server
    open_doc(client, URI, SOURCE)
    with pytest.raises(JsonRpcException):
        await send_raw_request(client, "textDocument/inlineCompletion", params)
    with pytest.raises(JsonRpcException):
        await send_raw_request(client, "textDocument/completion", params)
    result = await client.text_document_inline_completion_async(inline_params(URI, 4, 11))
    assert result.items


SLOW = {"dllm": {"steps": 256, "maxSpanTokens": 256, "maxLineTokens": 256, "threshold": 1.0}}
FAST = {"dllm": {"steps": 4, "maxLineTokens": 32, "threshold": 1.0}}


def configure(client, settings: dict) -> None:
    client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))


async def timed_completion(client) -> tuple[float, types.InlineCompletionList]:
    started = time.perf_counter()
    result = await client.text_document_inline_completion_async(inline_params(URI, 4, 11))
    return time.perf_counter() - started, result


async def test_cancel_request_answers_request_cancelled_and_frees_the_model(server):
    client, _, _ = server
    open_doc(client, URI, SOURCE)
    configure(client, FAST)
    fast_s, _ = await timed_completion(client)          # 4 steps of 32 tokens
    configure(client, SLOW)                              # 256 steps: ~64x longer if run to the end
    future = client.protocol.send_request("textDocument/inlineCompletion", inline_params(URI, 4, 11), msg_id="slow-1")
    await asyncio.sleep(0.3)
    client.protocol.notify("$/cancelRequest", types.CancelParams(id="slow-1"))
    with pytest.raises(JsonRpcException) as info:
        await asyncio.wrap_future(future)
    assert info.value.code == -32800
    # The worker stopped at a step boundary: the next request does not wait for the cancelled run.
    configure(client, FAST)
    after_s, after = await timed_completion(client)
    assert after.items
    assert after_s < 16 * fast_s + 1.0, (after_s, fast_s)


async def test_newer_request_supersedes_older(server):
    client, _, _ = server
    open_doc(client, URI, SOURCE)
    configure(client, SLOW)
    older = client.protocol.send_request("textDocument/inlineCompletion", inline_params(URI, 4, 11))
    await asyncio.sleep(0.3)
    configure(client, FAST)
    _, newer = await timed_completion(client)
    assert newer.items
    with pytest.raises(JsonRpcException) as info:
        await asyncio.wrap_future(older)
    assert info.value.code == -32800


@pytest.mark.parametrize("token", ["stream-1", 71])     # LSP's ProgressToken: a string or an integer
async def test_streamed_completion_reports_states_in_order(server, token):
    client, seen, _ = server
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"dllm": {"steps": 6, "threshold": 1.0, "streamIntervalMs": 0}})
    )
    open_doc(client, URI, SOURCE)
    params = {**raw_inline_params(URI, 4, 11), "partialResultToken": token}
    final = await send_raw_request(client, "dllm/inlineCompletion", params)
    await wait_until(lambda: any(p.token == token and p.value["kind"] == "end" for p in seen.progress))
    reports = [p.value for p in seen.progress if p.token == token and p.value["kind"] == "report"]
    steps = [r["step"] for r in reports]
    assert steps == sorted(steps) and len(steps) >= 2
    assert len({r["text"] for r in reports}) >= 2, "the span should sharpen over the steps"
    # The budget: 6 steps, 6 more each time the slot grows (threshold 1.0: the random model fills it).
    totals = [r["totalSteps"] for r in reports]
    assert totals[0] == 6 and totals == sorted(totals) and all(t % 6 == 0 for t in totals)
    assert all(r["step"] <= r["totalSteps"] for r in reports)
    assert reports[0]["range"]["start"] == {"line": 4, "character": 11}
    assert final.items[0].insertText


async def test_language_can_be_disabled(server):
    client, _, _ = server
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"dllm": {"languages": {"python": False}}})
    )
    open_doc(client, URI, SOURCE)
    result = await client.text_document_inline_completion_async(inline_params(URI, 4, 11))
    assert len(result.items) == 0


async def test_model_that_fails_to_load_leaves_the_server_running(tmp_path):
    client, seen, _ = await start_server(tmp_path, {"model": str(tmp_path / "no-such-model"), "device": "cpu"})
    try:
        status = await wait_loaded(client)
        assert not status["loaded"] and "does not exist" in status["error"]
        await wait_until(lambda: seen.messages)
        assert seen.messages[0].type == types.MessageType.Error
        assert "no-such-model" in seen.messages[0].message
        open_doc(client, URI, SOURCE)
        with pytest.raises(JsonRpcException) as info:
            await client.text_document_inline_completion_async(inline_params(URI, 4, 11))
        assert info.value.code == -32803 and "does not exist" in str(info.value)
    finally:
        await stop_server(client)


async def test_configuration_change_loads_another_model(tmp_path, tiny_model_dir):
    client, seen, _ = await start_server(tmp_path, {"model": str(tmp_path / "missing"), "device": "cpu"})
    try:
        assert not (await wait_loaded(client))["loaded"]
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"dllm": {"model": str(tiny_model_dir)}})
        )
        await asyncio.sleep(0.2)
        status = await wait_loaded(client)
        assert status["loaded"] and status["model"] == tiny_model_dir.name
    finally:
        await stop_server(client)


async def test_bad_options_are_reported_and_defaults_kept(tmp_path, tiny_model_dir):
    client, seen, _ = await start_server(tmp_path, {"model": str(tiny_model_dir), "device": "cpu", "steps": "many"})
    try:
        await wait_until(lambda: seen.messages)
        assert "steps must be an integer" in seen.messages[0].message
    finally:
        await stop_server(client)


async def test_cancelled_stream_stops_promptly(server):
    client, seen, _ = server
    open_doc(client, URI, SOURCE)
    configure(client, {"dllm": {**SLOW["dllm"], "streamIntervalMs": 0}})
    params = {**raw_inline_params(URI, 4, 11), "partialResultToken": "stream-cancel"}
    future = client.protocol.send_request("dllm/inlineCompletion", params, msg_id="stream-cancel-1")
    await wait_until(lambda: any(p.token == "stream-cancel" for p in seen.progress))
    client.protocol.notify("$/cancelRequest", types.CancelParams(id="stream-cancel-1"))
    with pytest.raises(JsonRpcException) as info:
        await asyncio.wrap_future(future)
    assert info.value.code == -32800
    at_the_answer = len([p for p in seen.progress if p.token == "stream-cancel"])
    await asyncio.sleep(0.5)
    reports = [p.value for p in seen.progress if p.token == "stream-cancel"]
    assert reports and all(r["kind"] == "report" for r in reports)   # no final answer after a cancel
    assert max(r["step"] for r in reports) < 256                      # it stopped well before the end
    # LSP: no report after the answer (the step running when it was cancelled sent one more)
    assert len(reports) == at_the_answer
    await asyncio.sleep(0.5)
    assert len([p for p in seen.progress if p.token == "stream-cancel"]) == at_the_answer   # and stays stopped


async def test_options_apply_to_the_loaded_model_without_a_reload(server):
    client, _, _ = server
    configure(client, {"dllm": {"contextTokens": 64}})
    status = await client.protocol.send_request_async("dllm/status", {})
    assert status.contextTokens == 64 and status.loaded
    open_doc(client, URI, SOURCE)
    result = await client.text_document_inline_completion_async(inline_params(URI, 4, 11))
    assert result.items
    configure(client, {"dllm": {"contextTokens": 1024}})
    assert (await client.protocol.send_request_async("dllm/status", {})).contextTokens == 1024


async def test_decode_options_reach_the_loop_per_request(server):
    """remaskBelow / confidence are per-request decode options: remasking everything committed
    below confidence 1 keeps the span open to the step budget, and the next request without it
    finishes early again (nothing of the shared engine was reconfigured)."""
    client, _, _ = server
    open_doc(client, URI, SOURCE)

    async def steps_taken() -> int:
        result = await client.text_document_completion_async(
            types.CompletionParams(text_document=types.TextDocumentIdentifier(uri=URI),
                                   position=types.Position(line=4, character=11)))
        if not result.items:
            return -1
        return int(result.items[0].detail.split(" · ")[1].split()[0])

    configure(client, {"dllm": {"steps": 12, "maxLineTokens": 8, "companionEdits": False}})
    plain = await steps_taken()
    configure(client, {"dllm": {"steps": 12, "maxLineTokens": 8, "companionEdits": False, "remaskBelow": 1.0,
                                "confidence": "margin"}})
    remasked = await steps_taken()
    configure(client, {"dllm": {"steps": 12, "maxLineTokens": 8, "companionEdits": False, "remaskBelow": None,
                                "confidence": "prob"}})
    again = await steps_taken()
    assert remasked >= 12 and 0 < plain < 12 and again == plain

"""The LSP surface as a strict client sees it: every message the real server sends is read back
with lsprotocol's converter (the LSP 3.17 shapes), over stdio and TCP, through the lifecycle
(before initialize, a second initialize / initialized, shutdown, exit), the position-encoding
negotiation, and documents opened twice or as notebook cells the server never asked for."""
from __future__ import annotations

import json

import pytest
from lsprotocol import types
from lsprotocol.converters import get_converter

from dllm_lsp.server.protocol import MAX_DOCUMENT_CHARS

from .raw_rpc import RawClient, in_process_tcp_server
from .test_connection_memory import connected_server
from .test_transport import OPTIONS, stop

pytestmark = pytest.mark.timeout(240)

_converter = get_converter()


def conforms(message: dict, method: str | None = None) -> None:
    """`message` structures as the LSP 3.17 type lsprotocol has for it: a request or notification
    by its method, an error response as ResponseErrorMessage, a result by the request's method.
    The server's own dllm/* methods have no LSP type: only their envelope is checked."""
    assert message.get("jsonrpc") == "2.0", message
    if "method" in message:
        cls = types.METHOD_TO_TYPES.get(message["method"], (None,))[0]
    elif "error" in message:
        cls = types.ResponseErrorMessage
        assert type(message["error"]["code"]) is int and isinstance(message["error"]["message"], str), message
    else:
        cls = types.METHOD_TO_TYPES.get(method, (None, None))[1]
    if cls is None:
        assert method is not None and method.startswith("dllm/"), message
        return
    try:
        _converter.structure(message, cls)
    except Exception as exc:   # the converter's own message names the field
        raise AssertionError(f"not an LSP {cls.__name__}: {json.dumps(message)[:400]}") from exc


def answered(client: RawClient, method: str, params, **kw) -> dict:
    answer = client.call(method, params, **kw)
    conforms(answer, method)
    return answer


def error_code(answer: dict) -> int | None:
    return answer["error"]["code"] if "error" in answer else None


@pytest.fixture(scope="module")
def tcp_port(tiny_model_dir):
    with in_process_tcp_server(tiny_model_dir, None) as port:
        yield port


def test_a_whole_session_speaks_lsp_3_17_and_keeps_the_lifecycle(tmp_path, tiny_model_dir):
    client, proc = RawClient.stdio(tmp_path, "--model", str(tiny_model_dir), "--device", "cpu")
    try:
        uri = "file:///work/session.py"
        params = {"textDocument": {"uri": uri}, "position": {"line": 1, "character": 11}}
        # before initialize: a request is ServerNotInitialized, a notification is dropped
        assert error_code(answered(client, "textDocument/completion", params)) == -32002
        client.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1,
                                                                "text": "early\n"}})
        init = answered(client, "initialize", {
            "processId": None, "rootUri": None, "initializationOptions": {**OPTIONS, "notAnOption": 1},
            "capabilities": {"general": {"positionEncodings": ["utf-32", "utf-16"]},
                             "window": {"workDoneProgress": True}, "workspace": {"applyEdit": True}}})
        capabilities = init["result"]["capabilities"]
        assert capabilities["positionEncoding"] == "utf-32"      # the client's first that the server has
        assert capabilities["textDocumentSync"]["change"] == types.TextDocumentSyncKind.Incremental
        assert "notebookDocumentSync" not in capabilities
        assert error_code(answered(client, "initialize", {"processId": None, "capabilities": {}})) == -32600
        client.notify("initialized", {})
        created = client.wait_for(lambda m: m.get("method") == "window/workDoneProgress/create", timeout=60)
        conforms(created)
        client.send({"jsonrpc": "2.0", "id": created["id"], "result": None})
        assert client.wait_loaded()["loaded"]
        # the didOpen sent before initialize was dropped
        assert error_code(answered(client, "textDocument/completion", params)) == -32602

        client.open(uri, "def f(x):\n    return \n\ndef g():\n    pass  # TODO\n")
        client.notify("$/setTrace", {"value": "verbose"})
        client.notify("$/cancelRequest", {"id": 424242})             # no such request
        client.notify("workspace/didChangeConfiguration", {"settings": None})
        client.notify("dllm/noSuchNotification", {"x": 1})
        client.notify("textDocument/didClose", {"textDocument": {"uri": "file:///never/opened.py"}})
        assert error_code(answered(client, "dllm/noSuchRequest", {})) == -32601
        assert error_code(answered(client, "textDocument/hover", params)) == -32601
        assert answered(client, "textDocument/completion", params)["result"]["items"]
        assert "items" in answered(client, "textDocument/inlineCompletion", {**params, "context": {"triggerKind": 1}})[
            "result"]
        actions = answered(client, "textDocument/codeAction", {
            "textDocument": {"uri": uri}, "range": {"start": {"line": 3, "character": 0},
                                                    "end": {"line": 4, "character": 16}},
            "context": {"diagnostics": [], "only": ["refactor"]}})["result"]
        assert [a["kind"] for a in actions] == ["refactor.rewrite"]
        client.send([{"jsonrpc": "2.0", "id": "in-a-batch", "method": "dllm/status"}])
        batch = client.wait_for(lambda m: isinstance(m, list))
        assert [error_code(m) for m in batch] == [-32600] and batch[0]["id"] == "in-a-batch"
        for message in batch:
            conforms(message)

        assert answered(client, "shutdown", None)["result"] is None
        assert error_code(answered(client, "textDocument/completion", params)) == -32600
        client.notify("exit")
        assert proc.wait(timeout=30) == 0
        client.closed.wait(10)
        while not client.inbox.empty():
            client.other.append(client.inbox.get())
        sent = [m for m in client.other if isinstance(m, dict)]
        for message in sent:      # progress, showMessage / logMessage (the unknown option), ...
            conforms(message)
        assert not [m for m in sent if m.get("method") == "window/showMessage"
                    and m["params"]["type"] == types.MessageType.Error], "null settings are no error"
        assert [m["params"]["value"]["kind"] for m in sent if m.get("method") == "$/progress"] == ["begin", "end"]
    finally:
        stop(proc)


def test_exit_without_shutdown_is_status_1(tmp_path, tiny_model_dir):
    client, proc = RawClient.stdio(tmp_path, "--model", str(tiny_model_dir), "--device", "cpu")
    try:
        assert "result" in client.initialize(OPTIONS)
        client.notify("exit")
        assert proc.wait(timeout=30) == 1
    finally:
        stop(proc)


EMOJI_LINE = 'def f(x):\n    s = "\U0001F600"; return '


@pytest.mark.parametrize("offered, chosen, column", [
    (None, "utf-16", 21),
    ([], "utf-16", 21),
    (["utf-8", "utf-16", "utf-32"], "utf-8", 23),
    (["utf-32", "utf-8"], "utf-32", 20),
    (["ucs-2", "utf-16", "utf-8"], "utf-16", 21),   # an encoding the server lacks is passed over
])
def test_the_negotiated_encoding_counts_every_position(tcp_port, offered, chosen, column):
    client = RawClient.tcp(tcp_port)
    try:
        capabilities = {} if offered is None else {"general": {"positionEncodings": offered}}
        init = client.initialize(OPTIONS, capabilities=capabilities)
        conforms(init, "initialize")
        assert init["result"]["capabilities"]["positionEncoding"] == chosen
        client.wait_loaded()
        uri = "file:///work/emoji.py"
        client.open(uri, EMOJI_LINE)
        answer = client.response(client.inline(uri, 1, column))
        conforms(answer, "textDocument/inlineCompletion")
        items = answer["result"]["items"]
        assert items, "the tiny model writes something after `return `"
        assert items[0]["range"]["start"] == {"line": 1, "character": column}
        # one unit past the line's end: InvalidParams in every encoding
        assert error_code(client.response(client.inline(uri, 1, column + 1))) == -32602
        if chosen != "utf-32":   # the emoji's second unit: inside a character
            inside = 10   # 9 units before it in both
            answer = client.response(client.inline(uri, 1, inside))
            assert error_code(answer) == -32602 and "splits a character" in answer["error"]["message"]
    finally:
        client.close()


def test_a_document_reopened_past_the_size_limit_keeps_no_copy_of_its_old_text(tcp_port):
    """didOpen of a document already open replaces it; when the new text is past
    MAX_DOCUMENT_CHARS the old text stayed (pygls' copy, its tree) and went on being context for
    the other documents' completions, though requests on it were refused."""
    client = RawClient.tcp(tcp_port)
    try:
        assert "result" in client.initialize({"steps": 2})
        uri, other = "file:///work/reopened.py", "file:///work/other.py"
        client.open(uri, "OLD_SECRET = 1\n")
        client.open(other)
        client.call("dllm/status")
        client.open(uri, "x = 1\n" + "#" * MAX_DOCUMENT_CHARS + "\n")
        warning = client.wait_for(lambda m: isinstance(m, dict) and m.get("method") == "window/showMessage", 60)
        conforms(warning)
        assert "limit" in warning["params"]["message"]
        assert error_code(client.response(client.inline(uri, 0, 1))) == -32803
        server = connected_server()
        assert server.trees.others(other) == [], "the old text was still context for other documents"
        assert server.trees.text_of(uri) is None
        assert "reopened.py" not in " ".join(server.workspace.text_documents)
        # reopened under the limit, it is served again
        client.open(uri, "def f(x):\n    return \n")
        assert "result" in client.response(client.inline(uri))
    finally:
        client.close()


def test_notebook_notifications_the_server_never_advertised_keep_nothing(tcp_port):
    """pygls' built-in notebook handlers stored every cell as an open text document, past the
    connection's caps (MAX_OPEN_CHARS, MAX_DOCUMENT_CHARS): nothing bounded what a client kept
    on a shared server this way."""
    client = RawClient.tcp(tcp_port)
    try:
        init = client.initialize({"steps": 2})
        assert "notebookDocumentSync" not in init["result"]["capabilities"]
        cells = [f"file:///work/nb.ipynb#cell{k}" for k in range(3)]
        client.notify("notebookDocument/didOpen", {
            "notebookDocument": {"uri": "file:///work/nb.ipynb", "notebookType": "jupyter-notebook", "version": 1,
                                 "cells": [{"kind": 2, "document": cell} for cell in cells]},
            "cellTextDocuments": [{"uri": cell, "languageId": "python", "version": 1, "text": "x = 1\n" * 1000}
                                  for cell in cells]})
        client.notify("notebookDocument/didChange", {
            "notebookDocument": {"uri": "file:///work/nb.ipynb", "version": 2},
            "change": {"cells": {"textContent": [{"document": {"uri": cells[0], "version": 2},
                                                  "changes": [{"text": "y = 2\n"}]}]}}})
        assert "result" in client.call("dllm/status")     # served, after both notifications
        # a request is never dropped unanswered, notebook-named or not
        assert error_code(client.call("notebookDocument/noSuchRequest", {})) == -32601
        server = connected_server()
        assert not server.workspace.text_documents, "notebook cells were kept as open documents"
        assert not server.workspace._notebook_documents
        # the server's own documents are unaffected
        client.open("file:///work/plain.py")
        assert "result" in client.response(client.inline("file:///work/plain.py"))
    finally:
        client.close()


def test_a_second_initialized_starts_no_second_load_progress(tmp_path, tiny_model_dir):
    """`initialized` is sent once; a second one while the model loaded created a second progress
    token and reported the one load twice (two "loading" notifications in the editor)."""
    client, proc = RawClient.stdio(tmp_path, "--model", str(tiny_model_dir), "--device", "cpu")
    try:
        assert "result" in client.initialize(OPTIONS, initialized=False,
                                             capabilities={"window": {"workDoneProgress": True}})
        client.notify("initialized", {})
        client.notify("initialized", {})
        created = client.wait_for(lambda m: m.get("method") == "window/workDoneProgress/create", timeout=60)
        client.send({"jsonrpc": "2.0", "id": created["id"], "result": None})
        assert client.wait_loaded()["loaded"]
        # each notification's work is started before the next message is read: anything a second
        # `initialized` sent comes before this answer
        assert "result" in client.call("dllm/status")
        again = [m for m in client.other if m.get("method") == "window/workDoneProgress/create"]
        assert not again, f"a second progress token for the same load: {again}"
        begun = [m for m in client.other if m.get("method") == "$/progress" and m["params"]["value"]["kind"] == "begin"]
        assert len(begun) == 1, begun
        client.shutdown_and_exit()
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)

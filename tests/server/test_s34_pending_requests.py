"""Requests the server sends its client have a bounded life (dllm_lsp/server/client_requests.py).

A client that never answered them left each one in pygls' table of pending requests until it
disconnected: 20,000 `didChangeConfiguration` whose settings pulls went unanswered held ~118 MiB.
These tests run the real `serve_tcp` in this process, on a thread (so they can count what the
connection's pygls protocol keeps), with a raw JSON-RPC client over a socket that answers only
when a test says so; the waits the server is given are shortened through its module constants."""
from __future__ import annotations

import asyncio
import gc
import io
import logging

import pytest
from lsprotocol import types

from dllm_lsp.server import app, client_requests, multisite_handlers
from dllm_lsp.server.app import DllmLanguageServer, create_server
from dllm_lsp.server.client_requests import ID_PREFIX, RequestNotSent
from dllm_lsp.server.transport import StdoutWriter

from .raw_rpc import RawClient, in_process_tcp_server

pytestmark = pytest.mark.timeout(180)

PULLS = 400


def connected_server() -> DllmLanguageServer:
    """The one connection's server that is still connected (a gone one writes to a _Discard)."""
    gc.collect()
    live = [o for o in gc.get_objects() if type(o) is DllmLanguageServer and type(o.protocol.writer).__name__ != "_Discard"]
    assert len(live) == 1, live
    return live[0]


def ours_pending(server: DllmLanguageServer) -> list:
    """What pygls still keeps of the server's own requests: string ids, whoever made them (the
    raw client's requests have integer ids)."""
    protocol = server.protocol
    return [i for table in (protocol._request_futures, protocol._result_types) for i in table if isinstance(i, str)]


def requests_of(client: RawClient, method: str) -> list[dict]:
    """The server's requests of `method` the client has received so far (taken from its inbox)."""
    found = []
    while True:
        try:
            found.append(client.wait_for(lambda m: isinstance(m, dict) and m.get("method") == method, timeout=0.5))
        except TimeoutError:
            return found


def warnings_in(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.fixture
def short_waits(monkeypatch):
    monkeypatch.setattr(app, "CONFIGURATION_WAIT_S", 0.2)
    monkeypatch.setattr(app, "CONFIGURATION_GIVE_UP_S", 1.0)
    monkeypatch.setattr(multisite_handlers, "APPLY_EDIT_TIMEOUT_S", 1.0)


def test_unanswered_settings_pulls_leave_nothing_behind(tiny_model_dir, short_waits, monkeypatch, caplog):
    """A client that declares workspace.configuration and never answers it, sending a
    didChangeConfiguration without settings again and again (the reproducer: each one a pull)."""
    monkeypatch.setattr(app, "CONFIGURATION_GIVE_UP_S", 5.0)
    caplog.set_level(logging.INFO)
    with in_process_tcp_server(tiny_model_dir) as port:
        client = RawClient.tcp(port)
        assert "result" in client.initialize({"model": str(tiny_model_dir), "device": "cpu"},
                                             capabilities={"workspace": {"configuration": True}})
        client.wait_loaded()
        server = connected_server()

        def no_answer(m) -> bool:
            return isinstance(m, dict) and m.get("method") == "window/logMessage" and "no answer" in m["params"]["message"]
        client.wait_for(no_answer, timeout=30)   # the first pull's (after `initialized`)
        for _ in range(PULLS):
            client.notify("workspace/didChangeConfiguration", {"settings": None})
        client.call("dllm/status")
        pulls = requests_of(client, "workspace/configuration")
        assert len(pulls) == PULLS + 1, len(pulls)   # the first one's, then one per change: all sent
        # a pull waits at most CONFIGURATION_GIVE_UP_S; one superseded by a newer pull is given up
        # on at once (its answer would have been dropped): the last one is warned of, not every
        # one (a window/logMessage, and a line in the log, each; the give-up is longer here than
        # the burst takes to read)
        client.wait_for(no_answer, timeout=30)
        with pytest.raises(TimeoutError):
            client.wait_for(no_answer, timeout=3)
        client.call("dllm/status")
        assert not ours_pending(server), f"{len(ours_pending(server))} given-up requests kept by pygls"
        assert len(server.protocol.client_requests) == 0 and not server.pulls

        # the answers come after all: each is dropped, quietly, and nothing is kept for them
        caplog.clear()
        for n, pull in enumerate(pulls):
            if n % 2:
                client.send({"jsonrpc": "2.0", "id": pull["id"], "result": [{"contextTokens": 300}]})
            else:
                client.send({"jsonrpc": "2.0", "id": pull["id"], "error": {"code": -32603, "message": "busy"}})
        status = client.call("dllm/status")["result"]
        assert status["contextTokens"] != 300, "a dropped pull's answer was applied"
        assert not warnings_in(caplog), warnings_in(caplog)[:3]
        late = [r for r in caplog.records if "came after it was given up on" in r.getMessage()]
        assert len([r for r in late if r.levelno >= logging.INFO]) == 1   # one line, not one per answer
        assert not ours_pending(server)

        # and a pull that is answered still applies
        client.notify("workspace/didChangeConfiguration", {"settings": None})
        pull = client.wait_for(lambda m: isinstance(m, dict) and m.get("method") == "workspace/configuration")
        client.send({"jsonrpc": "2.0", "id": pull["id"], "result": [{"contextTokens": 300}]})
        while client.call("dllm/status")["result"]["contextTokens"] != 300:
            pass
        assert not ours_pending(server)
        client.close()


def test_a_request_no_caller_bounds_is_given_up_after_its_life(tiny_model_dir, monkeypatch):
    """A request whose caller would wait longer than REQUEST_LIFE_S (none of ours does: any
    other request pygls sends) is given up on then, as a TimeoutError to its caller."""
    monkeypatch.setattr(app, "CONFIGURATION_WAIT_S", 0.2)
    monkeypatch.setattr(app, "CONFIGURATION_GIVE_UP_S", 600.0)
    monkeypatch.setattr(client_requests, "REQUEST_LIFE_S", 1.0)
    with in_process_tcp_server(tiny_model_dir) as port:
        client = RawClient.tcp(port)
        assert "result" in client.initialize({"model": str(tiny_model_dir), "device": "cpu"},
                                             capabilities={"workspace": {"configuration": True}})
        client.wait_for(lambda m: isinstance(m, dict) and m.get("method") == "workspace/configuration")
        warning = client.wait_for(lambda m: isinstance(m, dict) and m.get("method") == "window/logMessage"
                                  and "workspace/configuration" in m["params"]["message"], timeout=30)
        assert "no answer in 1 s; the options stay" in warning["params"]["message"], warning
        client.call("dllm/status")
        assert not ours_pending(connected_server())
        client.close()


def test_past_the_cap_a_request_is_not_sent_and_its_caller_is_told(tiny_model_dir, monkeypatch):
    """dllm.applyCompanionEdit on more documents than MAX_OUTSTANDING, never answered: the
    requests past the cap are not sent, and their commands answer `applied: false` at once,
    saying why; once one of the others is answered, a request is sent again."""
    cap = client_requests.MAX_OUTSTANDING
    with in_process_tcp_server(tiny_model_dir) as port:
        client = RawClient.tcp(port)
        assert "result" in client.initialize({"model": str(tiny_model_dir), "device": "cpu"})
        # each command waits for the edit it sent for as long as the test runs
        monkeypatch.setattr(multisite_handlers, "APPLY_EDIT_TIMEOUT_S", 600.0)
        uris = [f"file:///tmp/s34/m{n}.py" for n in range(cap + 2)]
        for uri in uris:
            client.open(uri, "x = 1\n")
        commands = {client.start("workspace/executeCommand", {"command": "dllm.applyCompanionEdit",
                                                              "arguments": [uri, "import sys"]}): uri for uri in uris}

        def is_edit(m) -> bool:
            return isinstance(m, dict) and m.get("method") == "workspace/applyEdit"

        def is_answer(m) -> bool:
            return isinstance(m, dict) and "method" not in m and m.get("id") in commands

        # the commands run side by side: whichever come after the first `cap` are refused
        refused = [client.wait_for(is_answer, timeout=60) for _ in range(len(uris) - cap)]
        assert all(r["result"]["applied"] is False and "not sent" in r["result"]["reason"]
                   and "unanswered" in r["result"]["reason"] for r in refused), refused
        assert all("edit" in r["result"] for r in refused)   # the edit is in the answer, for the client to apply
        edits = [client.wait_for(is_edit, timeout=60) for _ in range(cap)]
        assert not requests_of(client, "workspace/applyEdit")   # (sent before the refusals: all here)
        server = connected_server()
        assert len(server.protocol.client_requests) == cap

        # the client answers one: room for one more, on a document whose edit was refused
        client.send({"jsonrpc": "2.0", "id": edits[0]["id"], "result": {"applied": True}})
        again = client.start("workspace/executeCommand", {"command": "dllm.applyCompanionEdit",
                                                          "arguments": [commands[refused[0]["id"]], "import os"]})
        sent = [client.wait_for(is_edit, timeout=60)]
        assert not requests_of(client, "workspace/applyEdit")

        # every command ends once its edit is answered, and nothing of them is kept
        for edit in edits[1:] + sent:
            client.send({"jsonrpc": "2.0", "id": edit["id"], "result": {"applied": False}})
        waiting = [c for c in commands if c not in {r["id"] for r in refused}]
        answers = [client.response(c)["result"] for c in waiting + [again]]
        assert sum(a["applied"] for a in answers) == 1, answers
        client.call("dllm/status")   # (a command's task leaves pygls' table just after its answer is sent)
        assert len(server.protocol.client_requests) == 0 and not ours_pending(server)
        client.close()


def test_pygls_files_our_requests_where_forget_in_pygls_looks():
    """client_requests.forget_in_pygls reaches into pygls 2.1's private `_request_futures` and
    `_result_types` (there is no public way to give a request up): if pygls files its requests
    elsewhere, this fails, and given-up requests would pile up again unseen."""
    async def run() -> None:
        server = create_server()
        protocol = server.protocol
        protocol.set_writer(StdoutWriter(io.BytesIO()))
        params = types.ConfigurationParams(items=[types.ConfigurationItem(section="dllm")])
        answered = protocol.send_request(types.WORKSPACE_CONFIGURATION, params)
        given_up = protocol.send_request(types.WORKSPACE_CONFIGURATION, params)
        ids = list(protocol.client_requests._waiting)
        assert len(ids) == 2 and all(i.startswith(ID_PREFIX) for i in ids)
        for msg_id, future in zip(ids, (answered, given_up)):
            assert protocol._request_futures[msg_id] is future, "pygls no longer files its requests in _request_futures"
            assert msg_id in protocol._result_types, "pygls no longer files result types in _result_types"
        # answered (pygls' own path), then given up on (a caller's timeout cancels it)
        protocol.handle_message(protocol.structure_message({"jsonrpc": "2.0", "id": ids[0], "result": [None]}))
        assert list(answered.result()) == [None]
        given_up.cancel()
        assert not set(ids) & (set(protocol._request_futures) | set(protocol._result_types))
        assert len(protocol.client_requests) == 0 and protocol.client_requests.late(ids[1])
        assert not protocol.client_requests.late(f"{ID_PREFIX}99") and not protocol.client_requests.late(ids[1][:-1] + "²")

        # past the cap: not sent, failed at once
        protocol.client_requests.limit = 1
        protocol.send_request(types.WORKSPACE_CONFIGURATION, params)
        refused = protocol.send_request(types.WORKSPACE_CONFIGURATION, params)
        assert refused.done() and isinstance(refused.exception(), RequestNotSent)

    asyncio.run(run())


def test_a_load_reported_with_progress_leaves_no_token_behind(tiny_model_dir):
    """pygls keeps a Future for every progress token the server began and never lets it go: one
    per model load, for the life of the connection."""
    with in_process_tcp_server(tiny_model_dir) as port:
        client = RawClient.tcp(port)
        assert "result" in client.initialize({"model": str(tiny_model_dir), "device": "cpu"},
                                             capabilities={"window": {"workDoneProgress": True}})
        create = client.wait_for(lambda m: isinstance(m, dict) and m.get("method") == "window/workDoneProgress/create")
        client.send({"jsonrpc": "2.0", "id": create["id"], "result": None})
        client.wait_for(lambda m: isinstance(m, dict) and m.get("method") == "$/progress"
                        and m["params"]["value"]["kind"] == "end", timeout=90)
        client.call("dllm/status")
        server = connected_server()
        assert not server.work_done_progress.tokens, server.work_done_progress.tokens
        assert not ours_pending(server)
        client.close()


def test_commands_run_leave_nothing_in_pygls_table(tiny_model_dir):
    """pygls runs a command under a fresh id of its own in its table of pending requests, and
    left it there once done: every command's task, its result with it, for the connection's
    life. (A client without workspace.applyEdit: the command answers with the edit at once.)"""
    with in_process_tcp_server(tiny_model_dir) as port:
        client = RawClient.tcp(port)
        assert "result" in client.initialize({"model": str(tiny_model_dir), "device": "cpu"}, capabilities={})
        client.open("file:///tmp/s34/c.py", "x = 1\n")
        for n in range(5):
            answer = client.call("workspace/executeCommand", {"command": "dllm.applyCompanionEdit",
                                                              "arguments": ["file:///tmp/s34/c.py", f"import m{n}"]})
            assert answer["result"]["applied"] is False and "edit" in answer["result"], answer
        client.call("dllm/status")
        server = connected_server()
        assert not ours_pending(server) and not server.protocol._request_futures, list(server.protocol._request_futures)
        client.close()

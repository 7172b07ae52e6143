"""A TCP connection that has not shown its token costs next to nothing: no language server (pygls
server, options, workspace, thread pool) is built for it until its `initialize` carries the token;
without a token, none until a well-formed `initialize` has come.
A stranger connecting in a loop had one built and torn down per connection (~22 ms each), and
every other client's requests waited behind them.

Runs the real `serve_tcp` in this process, on a thread, so the test can count the language servers
that exist (as tests/server/test_connection_memory.py does); the clients are raw sockets."""
from __future__ import annotations

import asyncio
import gc
import select
import socket
import time

import pytest

from dllm_lsp.server import tcp
from dllm_lsp.server.app import DllmLanguageServer
from dllm_lsp.server.auth import AUTH_FAILED, SERVER_NOT_INITIALIZED
from dllm_lsp.server.tcp import MAX_UNAUTHENTICATED, MAX_UNAUTHENTICATED_PER_PEER
from dllm_lsp.server.transport import INVALID_PARAMS, PARSE_ERROR

from .raw_rpc import RawClient, frame, in_process_tcp_server
from .test_transport import OPTIONS

pytestmark = pytest.mark.timeout(120)

TOKEN = "preauth-token-for-tests"


@pytest.fixture
def guarded_port(tiny_model_dir):
    with in_process_tcp_server(tiny_model_dir, TOKEN) as port:
        yield port


def servers_built() -> int:
    """Language servers of this test's TCP server that exist now."""
    gc.collect()
    return sum(1 for o in gc.get_objects()
               if type(o) is DllmLanguageServer and getattr(o.protocol, "token", None) == TOKEN)


def test_no_language_server_is_built_before_the_token_is_shown(guarded_port):
    # Below the per-address share with room to spare: the fixture's probe and the one that
    # closes at once may still count as waiting when the refused one below connects.
    silent = [socket.create_connection(("127.0.0.1", guarded_port)) for _ in range(MAX_UNAUTHENTICATED_PER_PEER - 5)]
    # one that sends half an initialize and stalls, one that connects and goes at once
    partial = socket.create_connection(("127.0.0.1", guarded_port))
    partial.sendall(b'Content-Length: 200\r\n\r\n{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params"')
    socket.create_connection(("127.0.0.1", guarded_port)).close()
    try:
        # A connection accepted after all of them, answered: theirs were accepted (and, before
        # the fix, had their language servers built at once) before it was.
        wrong = RawClient.tcp(guarded_port)
        answer = wrong.initialize({**OPTIONS, "token": "wrong"})
        assert answer["error"]["code"] == AUTH_FAILED, answer
        assert wrong.closed.wait(10), "the server kept a refused connection open"
        wrong.close()
        assert servers_built() == 0
        good = RawClient.tcp(guarded_port)          # the count sees a server once one is built
        try:
            assert "result" in good.initialize({**OPTIONS, "token": TOKEN})
            assert servers_built() == 1
            assert good.wait_loaded()["loaded"]
            assert servers_built() == 1
        finally:
            good.close()
    finally:
        partial.close()
        for sock in silent:
            sock.close()


def test_initialize_with_the_token_and_what_follows_it_in_one_write_is_all_served(guarded_port):
    """The first message is read before the language server exists; the frames that came in the
    same packet stay in the reader and are served after it."""
    client = RawClient.tcp(guarded_port)
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"processId": None, "rootUri": None, "capabilities": {},
                           "initializationOptions": {**OPTIONS, "token": TOKEN}}}
        opened = {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": "file:///tmp/one_write.py", "languageId": "python", "version": 1, "text": "x = 1\n"}}}
        client.raw(frame(init) + frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}) + frame(opened)
                   + frame({"jsonrpc": "2.0", "id": 2, "method": "dllm/status", "params": {}}))
        assert "result" in client.response(1)
        assert "result" in client.response(2)
        assert client.wait_loaded()["loaded"]
        answer = client.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": "file:///tmp/one_write.py"}, "position": {"line": 0, "character": 5},
            "context": {"triggerKind": 1}})
        assert "result" in answer, answer          # the document sent in that same write is open
    finally:
        client.close()


@pytest.fixture
def open_port(tiny_model_dir):
    with in_process_tcp_server(tiny_model_dir, None) as port:
        yield port


def live_servers() -> int:
    """Language servers of connections still open (a gone connection's server writes to a _Discard)."""
    gc.collect()
    return sum(1 for o in gc.get_objects()
               if type(o) is DllmLanguageServer and isinstance(o.protocol.writer, asyncio.StreamWriter))


def test_a_server_without_a_token_builds_a_language_server_only_at_a_well_formed_initialize(open_port):
    """Without a token a language server was built at every accept: for a port scanner, for each
    idle connection. What comes before `initialize` is answered as it was, without one."""
    before = live_servers()
    silent = [socket.create_connection(("127.0.0.1", open_port)) for _ in range(5)]
    socket.create_connection(("127.0.0.1", open_port)).close()
    leaving = RawClient.tcp(open_port)
    leaving.notify("exit")                                    # before initialize: closes the connection
    assert leaving.closed.wait(10), "exit before initialize left the connection open"
    leaving.close()
    early = RawClient.tcp(open_port)
    try:
        uri = "file:///tmp/early.py"
        early.open(uri, "x = 1\n")                            # a notification before initialize: dropped
        answer = early.call("dllm/status", {})
        assert answer["error"]["code"] == SERVER_NOT_INITIALIZED and "initialize" in answer["error"]["message"]
        early.raw(frame(b"{not json"))
        assert early.response(None)["error"]["code"] == PARSE_ERROR
        bad = early.call("initialize", {"processId": None, "rootUri": None, "capabilities": 5})
        assert bad["error"]["code"] == INVALID_PARAMS, bad    # as the language server reads it
        assert live_servers() == before, "a language server was built before a well-formed initialize"
        assert "result" in early.initialize(OPTIONS)          # the same connection, initialized now
        assert live_servers() == before + 1
        assert early.wait_loaded()["loaded"]
        # the didOpen sent before initialize was dropped: the document is not open
        assert early.response(early.inline(uri, 0, 5))["error"]["code"] == INVALID_PARAMS
    finally:
        early.close()
        for sock in silent:
            sock.close()


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed `sock` (it sent nothing that is left unread), without waiting."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True             # reset: the server aborted it


def wait_closed(socks: list[socket.socket], count: int, timeout: float = 60.0) -> None:
    """Return once the server has closed `count` of `socks`; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    while sum(closed_by_server(s) for s in socks) < count:
        assert time.monotonic() < deadline, f"the server closed fewer than {count} of the connections"
        select.select(socks, [], [], 0.2)


def tcp_log(caplog, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == tcp.__name__ and words in r.getMessage()]


def test_a_connection_without_a_token_has_a_deadline_for_its_initialize(open_port, monkeypatch, caplog):
    """Without a token a connection that never initialized stayed open for good: a port scanner
    leaving its sockets open, or a client's bug, held them (a socket, a reader, a protocol
    object each) without limit. Now it is closed at the token path's deadline, whatever it sent
    before; one that initialized is served on past it."""
    monkeypatch.setattr(tcp, "AUTH_DEADLINE_S", 2.0)     # read per connection
    good = RawClient.tcp(open_port)
    assert "result" in good.initialize(OPTIONS)
    # opened after `good` initialized: once they are closed, its deadline has passed too
    silent = RawClient.tcp(open_port)
    chatty = RawClient.tcp(open_port)
    partial = RawClient.tcp(open_port)
    try:
        assert chatty.call("dllm/status", {})["error"]["code"] == SERVER_NOT_INITIALIZED
        partial.raw(b'Content-Length: 200\r\n\r\n{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params"')
        for client in (silent, chatty, partial):
            assert client.closed.wait(60), "a connection that never initialized stayed open"
        assert "result" in good.call("dllm/status", {})
        assert not good.closed.is_set()
        closings = tcp_log(caplog, "sent no initialize within")
        assert len(closings) == 1, closings            # the first of three: a log that cannot flood
    finally:
        for client in (good, silent, chatty, partial):
            client.close()


def test_a_server_without_a_token_holds_at_most_its_waiting_room(open_port, monkeypatch, caplog):
    """Past MAX_UNAUTHENTICATED connections waiting for their initialize, a new one is closed at
    once, as with a token; there is no per-address share (every peer of a token-less server is
    this machine). Once the waiting ones have gone, a client is served again."""
    monkeypatch.setattr(tcp, "AUTH_DEADLINE_S", 600.0)   # nobody leaves the room during the test
    # A round trip first: the fixture's probe, closed at once, has left the room by its end.
    first = RawClient.tcp(open_port)
    assert "result" in first.initialize(OPTIONS)
    first.close()
    extra = 3
    silent = [socket.create_connection(("127.0.0.1", open_port)) for _ in range(MAX_UNAUTHENTICATED + extra)]
    try:
        wait_closed(silent, extra)
        refused = RawClient.tcp(open_port)
        assert refused.closed.wait(30), "a connection past the waiting room was kept"
        refused.close()
        # accepted in order: the refusal above came after every silent one was let in or refused
        assert sum(not closed_by_server(s) for s in silent) == MAX_UNAUTHENTICATED
        refusals = tcp_log(caplog, "refused")
        assert len(refusals) == 1 and "waiting for their initialize" in refusals[0], refusals
    finally:
        for sock in silent:
            sock.close()
    deadline = time.monotonic() + 60
    while True:                                      # the server sees the closes one by one
        client = RawClient.tcp(open_port)
        try:
            answer = client.initialize(OPTIONS, timeout=5)
            break
        except (TimeoutError, OSError):
            assert client.closed.is_set() and time.monotonic() < deadline, "the room never emptied"
        finally:
            client.close()
    assert "result" in answer, answer

"""What a connection keeps is freed when it is no longer needed: a TCP connection that has gone
leaves nothing behind (its language server, documents, trees, edit histories), and a document
that is closed or grows past the size limit leaves nothing in the connection. Runs the real
`serve_tcp` in this process, on a thread, so the test can look at the servers still alive; the
clients are raw sockets."""
from __future__ import annotations

import gc
import time

import pytest

from dllm_lsp.server.app import DllmLanguageServer
from dllm_lsp.server.protocol import MAX_DOCUMENT_CHARS

from .raw_rpc import RawClient, in_process_tcp_server

BIG_PY = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(2000))


@pytest.fixture
def tcp_port(tiny_model_dir):
    with in_process_tcp_server(tiny_model_dir, None) as port:
        yield port


def servers_alive() -> set[int]:
    gc.collect()
    return {id(o) for o in gc.get_objects() if type(o) is DllmLanguageServer}


def test_servers_of_closed_connections_are_freed(tcp_port):
    before = servers_alive()
    for n in range(6):
        client = RawClient.tcp(tcp_port)
        assert "result" in client.initialize({"steps": 2})
        client.open(f"file:///work/big{n}.py", BIG_PY)
        client.wait_loaded()     # (a load in progress holds its connection's server until it ends)
        client.close()
    deadline = time.monotonic() + 30
    while servers_alive() - before and time.monotonic() < deadline:
        time.sleep(0.2)
    kept = servers_alive() - before
    assert not kept, f"{len(kept)} gone connections' servers (their documents and trees) were kept"


def connected_server() -> DllmLanguageServer:
    """The one connection's server that is still connected (a gone one writes to a _Discard)."""
    gc.collect()
    live = [o for o in gc.get_objects() if type(o) is DllmLanguageServer and type(o.protocol.writer).__name__ != "_Discard"]
    assert len(live) == 1, live
    return live[0]


def test_the_edit_history_goes_with_its_document_however_the_uri_is_spelt(tcp_port):
    client = RawClient.tcp(tcp_port)
    assert "result" in client.initialize({"steps": 2})
    for n in range(3):
        client.open(f"file:///c%3A/project/f{n}.py", BIG_PY)
        client.notify("textDocument/didChange", {"textDocument": {"uri": f"file:///c%3A/project/f{n}.py", "version": 2},
                                                 "contentChanges": [{"text": BIG_PY + "x = 1\n"}]})
        client.notify("textDocument/didClose", {"textDocument": {"uri": f"file:///c:/project/f{n}.py"}})
    client.call("dllm/status")         # the notifications before it have been handled
    server = connected_server()
    assert not server.multisite.history._versions, "closed documents' edit histories were kept"
    assert not server.trees.others("file:///elsewhere.py")
    client.close()


def test_a_document_grown_past_the_limit_is_forgotten_everywhere(tcp_port):
    client = RawClient.tcp(tcp_port)
    assert "result" in client.initialize({"steps": 2})
    uri = "file:///tmp/generated.py"
    line = "value = compute(alpha, beta)\n"
    client.open(uri, line * 10)
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": line * (MAX_DOCUMENT_CHARS // len(line) + 1)}]})
    warning = client.wait_for(lambda m: isinstance(m, dict) and m.get("method") == "window/showMessage", timeout=60)
    assert "limit" in warning["params"]["message"]
    client.call("dllm/status")
    server = connected_server()
    assert server.trees.text_of(uri) is None, "its parsed copy stayed, stale, as context for the other documents"
    assert not server.multisite.history.earlier(uri, "")
    client.close()

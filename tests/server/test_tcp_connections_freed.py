"""A TCP connection that has gone leaves nothing behind: its language server (documents, trees,
edit histories) is freed. Runs the real `serve_tcp` in this process, on a thread, so the test can
count the servers still alive; the clients are raw sockets."""
from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time

import pytest

from dllm_lsp.options import Options
from dllm_lsp.server.app import DllmLanguageServer
from dllm_lsp.server.model_host import ModelHost
from dllm_lsp.server.tcp import serve_tcp

from .raw_rpc import RawClient

BIG_PY = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(2000))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tcp_port(tiny_model_dir):
    port = free_port()
    loop = asyncio.new_event_loop()
    settings = Options().merged({"model": str(tiny_model_dir), "device": "cpu"})

    def serve() -> None:
        try:
            loop.run_until_complete(serve_tcp("127.0.0.1", port, settings, None, ModelHost()))
        except asyncio.CancelledError:   # the fixture's teardown
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the in-process server did not listen"
            time.sleep(0.05)
    yield port
    loop.call_soon_threadsafe(lambda: [task.cancel() for task in asyncio.all_tasks(loop)])
    thread.join(10)


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

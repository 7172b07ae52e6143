"""A TCP client that vanishes leaves nothing of itself in the shared server (docs/deploy.md):
not the model it was about to ask for, not work on the requests it sent before it went. Real
`serve --tcp` subprocesses, raw sockets."""
from __future__ import annotations

import socket
import struct
import time

import pytest

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.server.app import CONFIGURATION_WAIT_S

from .raw_rpc import RawClient, frame
from .test_transport import start_tcp_server, stop

pytestmark = pytest.mark.timeout(180)


def test_a_client_gone_while_its_settings_are_pulled_loads_and_holds_no_model(tmp_path, tiny_model_dir):
    """A client that declares workspace/configuration and leaves before answering it: the first
    pull's wait ended with the connection, and the load it holds back then started for the
    client that had gone, as its user for good. With one model seat, the next client was refused
    its own model ("all in use by other connections") for the server's life."""
    allowed = tmp_path / "allowed"
    other = write_tiny_model(allowed / "other", seed=1)
    proc, port = start_tcp_server(tmp_path, tiny_model_dir, "--max-models", "1", "--allow-model-dir", str(allowed))
    try:
        gone = RawClient.tcp(port)
        assert "result" in gone.initialize({}, capabilities={"workspace": {"configuration": True}})
        gone.wait_for(lambda m: m.get("method") == "workspace/configuration")
        gone.close()
        # past the first pull's bounded wait: whatever that wait starts has started by now
        time.sleep(CONFIGURATION_WAIT_S + 1.0)
        client = RawClient.tcp(port)
        assert "result" in client.initialize({"model": str(other)})
        status = client.wait_loaded()
        assert status["error"] is None, status["error"]
        assert status["loaded"] and status["model"] == "other", status["model"]
        client.shutdown_and_exit()
        client.close()
    finally:
        stop(proc)
    log = (tmp_path / "tcp.log").read_text()
    assert "loaded tiny" not in log, "a model was loaded for a client that had gone"


def test_requests_of_a_client_that_has_reset_are_not_served(tmp_path, tiny_model_dir):
    """A client that sends a burst of requests and resets (a killed editor, a dropped tunnel):
    the frames already read were all served for nobody, each answer a failed write that asyncio
    logs as a WARNING (295 lines for 300 requests). The connection now ends at the reset."""
    proc, port = start_tcp_server(tmp_path, tiny_model_dir)
    try:
        gone = RawClient.tcp(port)
        assert "result" in gone.initialize({"steps": 2})
        gone.wait_loaded()
        gone.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))   # close = reset
        where = gone.sock.getsockname()
        gone.raw(b"".join(frame({"jsonrpc": "2.0", "id": 1000 + n, "method": "dllm/status"}) for n in range(300)))
        gone.close()
        log = logged(tmp_path / "tcp.log", f"client {where!r} disconnected")
        client = RawClient.tcp(port)          # the server goes on serving
        assert "result" in client.initialize({"steps": 2})
        assert client.wait_loaded()["loaded"]
        client.shutdown_and_exit()
        client.close()
    finally:
        stop(proc)
    assert log.count("socket.send() raised exception") == 0, log.count("socket.send() raised exception")


def logged(path, line: str, timeout: float = 60.0) -> str:
    """The server's log once it holds `line`."""
    deadline = time.monotonic() + timeout
    while line not in (text := path.read_text()):
        assert time.monotonic() < deadline, f"{line!r} never logged:\n{text[-2000:]}"
        time.sleep(0.1)
    return text

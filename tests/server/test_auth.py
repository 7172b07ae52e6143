"""TCP access control (docs/deploy.md): no token, no listening beyond loopback; with a token, a
connection must present it in `initialize` or is answered with an error and closed."""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time

import pytest

from dllm_lsp.server.auth import AUTH_FAILED, SERVER_NOT_INITIALIZED, AuthError, check_bind, load_token
from dllm_lsp.server.tcp import AUTH_DEADLINE_S, MAX_UNAUTHENTICATED_PER_PEER

from .raw_rpc import RawClient, frame
from .test_transport import OPTIONS, free_port, start_tcp_server, stop

pytestmark = pytest.mark.timeout(180)

TOKEN = "s3cret-token-for-tests"


def test_non_loopback_host_needs_a_token(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DLLM_LSP_TOKEN"}
    out = subprocess.run([sys.executable, "-m", "dllm_lsp", "serve", "--tcp", f"0.0.0.0:{free_port()}"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1 and "token" in out.stderr, out.stderr
    with pytest.raises(AuthError):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", TOKEN)
    with pytest.raises(AuthError, match="token of 4 characters"):
        check_bind("0.0.0.0", "abcd")               # guessable: wrong tokens are not throttled
    check_bind("127.0.0.1", "abcd")
    check_bind("127.0.0.1", None)
    check_bind("localhost", None)
    check_bind("::1", None)


def test_token_from_file_or_environment(tmp_path):
    (tmp_path / "token").write_text(TOKEN + "\n")
    assert load_token(str(tmp_path / "token"), {}) == TOKEN
    assert load_token(None, {"DLLM_LSP_TOKEN": TOKEN}) == TOKEN
    assert load_token(None, {}) is None
    with pytest.raises(AuthError):
        load_token(str(tmp_path / "missing"), {})
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(AuthError):
        load_token(str(tmp_path / "empty"), {})
    # the first line is the token (a base64 token wraps at 76 characters; editors send line one)
    (tmp_path / "wrapped").write_text(TOKEN + "\nAAAA==\n")
    assert load_token(str(tmp_path / "wrapped"), {}) == TOKEN



def test_a_token_file_others_can_read_is_warned_about(tmp_path, caplog):
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o644)
    with caplog.at_level(logging.WARNING):
        assert load_token(str(token), {}) == TOKEN
    assert "readable by other users" in caplog.text and "chmod 600" in caplog.text
    caplog.clear()
    token.chmod(0o600)
    load_token(str(token), {})
    assert "readable" not in caplog.text


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("auth")
    (tmp / "token").write_text(TOKEN)
    proc, port = start_tcp_server(tmp, tiny_model_dir, "--token-file", str(tmp / "token"))
    try:
        yield port, tmp
    finally:
        stop(proc)


def refused(client: RawClient, answer: dict, code: int = AUTH_FAILED) -> None:
    assert "error" in answer and answer["error"]["code"] == code, answer
    assert client.closed.wait(10), "the server kept the connection open"


@pytest.mark.parametrize("options", [{}, {"token": "wrong"}, {"token": 42}])
def test_initialize_without_the_token_is_refused_and_closed(guarded_server, options):
    port, tmp = guarded_server
    client = RawClient.tcp(port)
    try:
        answer = client.initialize({**OPTIONS, **options})
        refused(client, answer)
    finally:
        client.close()


def test_nothing_is_read_before_a_good_initialize(guarded_server):
    port, tmp = guarded_server
    client = RawClient.tcp(port)
    try:
        client.open("file:///tmp/secret.py", "x = 1\n")     # a document before initialize
        assert client.closed.wait(10), "the server kept the connection open"
    finally:
        client.close()
    client = RawClient.tcp(port)
    try:
        refused(client, client.call("dllm/status", {}), SERVER_NOT_INITIALIZED)
    finally:
        client.close()
    assert "secret.py" not in (tmp / "tcp.log").read_text()


@pytest.mark.parametrize("first", [b"Content-Length: 5\r\n\r\nabcde", b"Content-Length: x\r\n\r\n{}",
                                   frame(b'[{"jsonrpc": "2.0", "id": 1, "method": "dllm/status"}]'), frame(b"7"),
                                   frame(b'{"jsonrpc": "1.0", "id": 1, "method": "initialize"}')])
def test_a_malformed_first_message_closes_the_connection_too(guarded_server, first):
    """Garbage, a bad header, a batch or a message that is none never reached the protocol's gate:
    answered, but the connection stayed open, and an unauthenticated peer could go on sending
    frames of up to 64 MiB for the server to decode."""
    port, _ = guarded_server
    client = RawClient.tcp(port)
    try:
        client.raw(first)
        assert client.closed.wait(10), "the server kept the connection open"
    finally:
        client.close()


def test_the_right_token_is_served(guarded_server):
    port, _ = guarded_server
    client = RawClient.tcp(port)
    try:
        assert "result" in client.initialize({**OPTIONS, "token": TOKEN})
        assert client.wait_loaded()["loaded"]
        client.open("file:///tmp/ok.py")
        assert "result" in client.call("dllm/status", {})
    finally:
        client.close()


def test_token_from_the_environment_guards_the_server(tmp_path, tiny_model_dir):
    proc, port = start_tcp_server(tmp_path, tiny_model_dir, env={**os.environ, "DLLM_LSP_TOKEN": TOKEN})
    try:
        client = RawClient.tcp(port)
        refused(client, client.initialize(OPTIONS))
        client.close()
        client = RawClient.tcp(port)
        assert "result" in client.initialize({**OPTIONS, "token": TOKEN})
        client.close()
    finally:
        stop(proc)


def test_strangers_cannot_hold_more_than_their_share_of_connections(guarded_server):
    """300 silent sockets, each kept for the deadline, exhausted the server's file descriptors:
    a client with the token then got no answer. Beyond their share one address's are closed."""
    port, _ = guarded_server
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_UNAUTHENTICATED_PER_PEER + 8)]
    try:
        time.sleep(1.0)
        closed = 0
        for sock in silent:
            sock.settimeout(0.2)
            try:
                closed += sock.recv(1) == b""
            except socket.timeout:
                pass
            except OSError:
                closed += 1
        assert closed >= 8, closed                     # the ones over the limit, at once
    finally:
        for sock in silent:
            sock.close()
    time.sleep(0.5)
    good = RawClient.tcp(port)                          # once they have gone, it does
    try:
        assert "result" in good.initialize({**OPTIONS, "token": TOKEN})
    finally:
        good.close()


def test_a_stranger_can_neither_hold_a_big_frame_nor_stay_silent(guarded_server):
    # Four such connections held 243 MiB of the server's memory, and its re-reading of their
    # stalled bodies made every client wait seconds.
    port, tmp = guarded_server
    big = RawClient.tcp(port)
    silent = RawClient.tcp(port)
    started = time.monotonic()
    try:
        try:
            big.raw(b"Content-Length: 60000000\r\n\r\n[" + b"1," * 200_000)
        except OSError:
            pass                                           # closed while it was still sending
        assert big.closed.wait(10), "a 60 MB frame before the token was read"
        good = RawClient.tcp(port)
        try:
            assert "result" in good.initialize({**OPTIONS, "token": TOKEN})
            assert "result" in good.call("dllm/status")
        finally:
            good.close()
        assert silent.closed.wait(AUTH_DEADLINE_S + 15), "a connection that never initialized stayed open"
        assert time.monotonic() - started >= AUTH_DEADLINE_S - 1
    finally:
        big.close()
        silent.close()

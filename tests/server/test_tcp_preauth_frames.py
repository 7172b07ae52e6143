"""What a token-less TCP connection can make the server hold before its `initialize`
(docs/deploy.md, "Limits"). Its frames were read whole up to 64 MiB, so 64 waiting connections
each sending most of a 64 MiB frame held ~4 GiB for their 10 s; and any connection's header
block kept every header line, so an endless block of distinct headers grew without limit. Now a
frame above PRE_AUTH_MAX_FRAME before initialize is refused (-32700) and read past a line at a
time without being held, as with a token (where the connection is then closed; here it stays
open for its `initialize`), and a header block keeps only its Content-Length.

Against a real `serve --tcp` subprocess (no token), whose peak resident memory (VmHWM) is read
from /proc; the clients are raw sockets (tests/server/raw_rpc.py)."""
from __future__ import annotations

import json

import pytest

from dllm_lsp.server.auth import SERVER_NOT_INITIALIZED
from dllm_lsp.server.tcp import PRE_AUTH_MAX_FRAME
from dllm_lsp.server.transport import INVALID_PARAMS, PARSE_ERROR

from .raw_rpc import RawClient, frame
from .test_transport import OPTIONS, start_tcp_server, stop

pytestmark = pytest.mark.timeout(180)

BIG = 60 * 1024 * 1024
# The server's peak memory may grow by this much while a connection sends a 60 MiB frame or a
# 20 MB header block before initialize (it held more than 120 MiB for the frame: the body, then
# its text decoded; and more than 150 MiB for the header block's dict).
GROWTH_BOUND_KB = 16 * 1024


def peak_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def did_open(uri: str, text: str) -> dict:
    return {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": text}}}


def early_status(client: RawClient) -> dict:
    """A request before initialize: its answer (-32002) comes once the frames before it were read."""
    answer = client.call("dllm/status", {}, timeout=60)
    assert answer["error"]["code"] == SERVER_NOT_INITIALIZED, answer
    return answer


@pytest.fixture
def server(tmp_path, tiny_model_dir):
    proc, port = start_tcp_server(tmp_path, tiny_model_dir)
    try:
        warm = RawClient.tcp(port)        # the first connection's one-off costs, before any baseline
        early_status(warm)
        warm.close()
        yield proc, port
    finally:
        stop(proc)


def test_a_60_mib_didopen_before_initialize_is_refused_without_being_held(server):
    proc, port = server
    client = RawClient.tcp(port)
    try:
        before = peak_kb(proc.pid)
        line = "def f(x):\n    return {'a': \"b\\\\\"}[x]\n"            # quotes, escapes, brackets
        text = line * (BIG // (len(json.dumps(line)) - 2))
        body = json.dumps(did_open("file:///tmp/big_early.py", text)).encode()
        assert BIG < len(body) < BIG + 1024
        client.raw(frame(body))
        del body, text
        refused = client.response(None, timeout=60)
        assert refused["error"]["code"] == PARSE_ERROR and str(PRE_AUTH_MAX_FRAME) in refused["error"]["message"]
        early_status(client)              # the whole body has been read past
        grown = peak_kb(proc.pid) - before
        assert grown < GROWTH_BOUND_KB, f"the server's peak memory grew by {grown} kB"
        assert "result" in client.initialize(OPTIONS)     # the same connection goes on
        assert client.wait_loaded()["loaded"]
        # never read: the document is not open
        answer = client.response(client.inline("file:///tmp/big_early.py", 0, 5))
        assert answer["error"]["code"] == INVALID_PARAMS and "is not open" in answer["error"]["message"], answer
    finally:
        client.close()


def test_an_endless_header_block_is_not_kept(server):
    proc, port = server
    client = RawClient.tcp(port)
    try:
        before = peak_kb(proc.pid)
        request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "dllm/status", "params": {}}).encode()
        lines = b"".join(b"X-Pad-%07d: y\r\n" % i for i in range(1_000_000))     # 20 MB, each name new
        client.raw(b"Content-Length: %d\r\n" % len(request) + lines + b"\r\n" + request)
        del lines
        answer = client.response(1, timeout=60)
        assert answer["error"]["code"] == SERVER_NOT_INITIALIZED, answer   # the frame was read as one
        grown = peak_kb(proc.pid) - before
        assert grown < GROWTH_BOUND_KB, f"the server's peak memory grew by {grown} kB"
    finally:
        client.close()


PAD = 'x = "{[\\"]}"\n' * (PRE_AUTH_MAX_FRAME // 12)


def test_after_initialize_big_frames_are_read_whole_again(server):
    """The limit is the time before `initialize`: a big request before it is refused, a big
    didOpen after it opens its document."""
    proc, port = server
    client = RawClient.tcp(port)
    try:
        client.raw(frame(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "dllm/status", "params": {"pad": PAD}})))
        assert client.response(None)["error"]["code"] == PARSE_ERROR
        early_status(client)
        assert "result" in client.initialize(OPTIONS)
        assert client.wait_loaded()["loaded"]
        # A position outside the document is refused as such, not as that of a document not open.
        uri = "file:///tmp/big_after.py"
        client.send(did_open(uri, "def f(x):\n    return \n" + "# pad\n" * (PRE_AUTH_MAX_FRAME // 6)))
        answer = client.response(client.inline(uri, 10**6, 0))
        assert answer["error"]["code"] == INVALID_PARAMS and "is not open" not in answer["error"]["message"], answer
    finally:
        client.close()

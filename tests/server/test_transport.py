"""Malformed frames and messages, sent byte for byte by a raw client to the real server over stdio
and over TCP: each is answered (or refused with one log line) and the next request still works."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from dllm_lsp.net import free_port
from dllm_lsp.server.app import PROGRESS_CREATE_S
from dllm_lsp.server.protocol import MAX_DOCUMENT_CHARS
from dllm_lsp.server.transport import CLIENT_POLL_S, MAX_FRAME_BYTES
from tests.ports import wait_listening

from .raw_rpc import RawClient, frame

pytestmark = pytest.mark.timeout(240)

STATUS = {"jsonrpc": "2.0", "method": "dllm/status", "params": {}}


def is_error(message, code: int) -> bool:
    return isinstance(message, dict) and "error" in message and message["error"]["code"] == code


def null_id_error(code: int):
    return lambda m: is_error(m, code) and m["id"] is None


def still_serves(client: RawClient) -> None:
    """The server answers a plain request after whatever the test sent."""
    assert client.call("dllm/status", {}, timeout=30)["result"]["loaded"]


# --- one function per case; each gets an initialized client with the model loaded ------------------

def case_body_shorter_than_content_length(c: RawClient) -> None:
    body = json.dumps({**STATUS, "id": "short"}).encode()
    c.raw(b"Content-Length: %d\r\n\r\n" % (len(body) + 25) + body)
    after = c.start("dllm/status", {})
    assert "result" in c.response(after)          # the next frame is found inside the short body
    assert "result" in c.response("short")        # and the short frame itself is served


def case_body_shorter_than_content_length_and_nothing_follows(c: RawClient) -> None:
    body = json.dumps({**STATUS, "id": "alone"}).encode()
    c.raw(b"Content-Length: %d\r\n\r\n" % (len(body) + 40) + body)
    assert "result" in c.response("alone", timeout=15)   # served once the stream stalls


def case_body_longer_than_content_length(c: RawClient) -> None:
    body = json.dumps({**STATUS, "id": "long"}).encode()
    c.raw(b"Content-Length: %d\r\n\r\n" % (len(body) - 10) + body)
    assert c.wait_for(null_id_error(-32700))
    still_serves(c)


def case_no_content_length(c: RawClient) -> None:
    body = json.dumps({**STATUS, "id": "nolength"}).encode()
    c.raw(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + body)
    assert "Content-Length" in c.wait_for(null_id_error(-32700))["error"]["message"]
    still_serves(c)


def case_bad_content_length(c: RawClient, value: bytes = b"abc") -> None:
    body = json.dumps({**STATUS, "id": "bad"}).encode()
    c.raw(b"Content-Length: " + value + b"\r\n\r\n" + body)
    assert "not a non-negative integer" in c.wait_for(null_id_error(-32700))["error"]["message"]
    still_serves(c)


def case_negative_content_length(c: RawClient) -> None:
    case_bad_content_length(c, b"-5")


def case_content_length_with_junk(c: RawClient) -> None:
    case_bad_content_length(c, b"12x")


def case_lower_case_header(c: RawClient) -> None:
    body = json.dumps({**STATUS, "id": "lower"}).encode()
    c.raw(b"content-length: %d\r\n\r\n" % len(body) + body)
    assert "result" in c.response("lower")


def case_one_terabyte_frame(c: RawClient) -> None:
    c.raw(b"Content-Length: 1000000000000\r\n\r\n")      # and the stream stays open
    message = c.wait_for(null_id_error(-32700))["error"]["message"]
    assert "refused" in message and str(MAX_FRAME_BYTES) in message
    still_serves(c)


def case_batch(c: RawClient) -> None:
    c.send([{**STATUS, "id": "b1"}, {"jsonrpc": "2.0", "method": "initialized", "params": {}}, 7])
    answer = c.wait_for(lambda m: isinstance(m, list))
    assert [(a["id"], a["error"]["code"]) for a in answer] == [("b1", -32600), (None, -32600)]
    c.send([])
    assert c.wait_for(null_id_error(-32600))
    still_serves(c)


def case_object_id(c: RawClient) -> None:
    c.send({**STATUS, "id": {"nested": 1}})
    assert "id" in c.wait_for(null_id_error(-32600))["error"]["message"]
    still_serves(c)


def case_request_without_params(c: RawClient) -> None:
    answer = c.call("dllm/status", omit_params=True)
    assert answer["result"]["loaded"]


def case_invalid_json(c: RawClient) -> None:
    c.raw(frame(b'{"jsonrpc": "2.0", "id": 1, "method": '))
    assert "not valid JSON" in c.wait_for(null_id_error(-32700))["error"]["message"]
    c.raw(frame(b'{"jsonrpc": "2.0", "id": 2, "method": "dllm/status", "params": {"x": "\xff\xfe"}}'))
    assert "UTF-8" in c.wait_for(null_id_error(-32700))["error"]["message"]
    still_serves(c)
    popups = [m for m in c.other if isinstance(m, dict) and m.get("method") == "window/showMessage"
              and "Error in server" in m["params"]["message"]]
    assert not popups


def case_json_nested_too_deeply(c: RawClient) -> None:
    """Far deeper than Python's recursion limit: the parser's RecursionError once ended the read
    loop, and with it the stdio server (no answer at all)."""
    for inner in ("1", '"\\ud800"'):          # the second one also goes through the surrogate repair
        deep = "[" * 100_000 + inner + "]" * 100_000
        c.raw(frame(('{"jsonrpc": "2.0", "id": "deep", "method": "dllm/status", "params": {"x": %s}}' % deep).encode()))
        assert "nested too deeply" in c.wait_for(null_id_error(-32700))["error"]["message"]
    deep = "[" * 900 + "1" + "]" * 900                   # parses: the request itself is answered
    c.raw(frame(('{"jsonrpc": "2.0", "id": "deep900", "method": "dllm/status", "params": {"x": %s}}' % deep).encode()))
    assert "result" in c.response("deep900")
    still_serves(c)


def case_lone_surrogate_in_document(c: RawClient) -> None:
    uri = f"file:///tmp/surrogate{time.monotonic_ns()}.py"
    c.raw(frame('{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {"uri": "%s", '
                '"languageId": "python", "version": 1, "text": "s = \\"\\ud800\\"\\ndef f(x):\\n    return \\n"}}}'
                % uri))
    for _ in range(2):
        answer = c.response(c.inline(uri, 2, 11))
        assert "result" in answer, answer


def case_document_above_the_limit(c: RawClient) -> None:
    uri = f"file:///tmp/huge{time.monotonic_ns()}.py"
    c.open(uri, "x = 1\n" * (MAX_DOCUMENT_CHARS // 6 + 1))
    warning = c.wait_for(lambda m: isinstance(m, dict) and m.get("method") == "window/showMessage")
    assert "limit" in warning["params"]["message"]
    answer = c.response(c.inline(uri, 0, 5))
    assert is_error(answer, -32803) and "limit" in answer["error"]["message"]
    at = {"textDocument": {"uri": uri}, "position": {"line": 0, "character": 5}}
    whole = {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 0}}
    for method, params in [("dllm/inlineCompletion", {**at, "partialResultToken": "big"}), ("dllm/nextEdits", at),
                           ("workspace/executeCommand", {"command": "dllm.fillHoles", "arguments": [uri, whole]})]:
        answer = c.call(method, params)                  # our own methods too, not "not open"
        assert is_error(answer, -32803) and "limit" in answer["error"]["message"], (method, answer)
    c.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    still_serves(c)


def case_a_percent_encoded_uri_that_grows_past_the_limit(c: RawClient) -> None:
    # Its size was looked up under the encoded spelling, pygls keys the decoded one: it went on
    # being parsed and completed past the limit, and nothing was said.
    uri = f"file:///tmp/My%20Project/grown{time.monotonic_ns()}.py"
    c.open(uri, "x = 1\n")
    c.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                        "contentChanges": [{"text": "x = 1\n" * (MAX_DOCUMENT_CHARS // 6 + 1)}]})
    warning = c.wait_for(lambda m: isinstance(m, dict) and m.get("method") == "window/showMessage"
                         and "grown" in m["params"]["message"])
    assert "limit" in warning["params"]["message"]
    answer = c.response(c.inline(uri, 0, 5))
    assert is_error(answer, -32803) and "limit" in answer["error"]["message"]
    c.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    still_serves(c)


CASES = {name[len("case_"):]: fn for name, fn in dict(globals()).items() if name.startswith("case_")}


# --- servers ----------------------------------------------------------------------------------------

def start_tcp_server(tmp_path, model_dir, *extra: str, env=None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dllm_lsp", "serve", "--tcp", f"127.0.0.1:{port}", "--model", str(model_dir),
         "--device", "cpu", "--log-file", str(tmp_path / "tcp.log"), *extra], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    wait_listening(port, proc)
    return proc, port


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


OPTIONS = {"steps": 4, "maxLineTokens": 8, "maxSpanTokens": 16}


@pytest.fixture(scope="module")
def stdio_client(tmp_path_factory, tiny_model_dir):
    client, proc = RawClient.stdio(tmp_path_factory.mktemp("stdio"), "--model", str(tiny_model_dir),
                                   "--device", "cpu")
    try:
        assert "result" in client.initialize(OPTIONS)
        assert client.wait_loaded()["loaded"]
        yield client
        client.shutdown_and_exit()
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def tcp_server(tmp_path_factory, tiny_model_dir):
    proc, port = start_tcp_server(tmp_path_factory.mktemp("tcp"), tiny_model_dir)
    try:
        yield port
    finally:
        stop(proc)


@pytest.mark.parametrize("case", sorted(CASES))
def test_transport_case_over_stdio(stdio_client, case):
    CASES[case](stdio_client)
    still_serves(stdio_client)


@pytest.mark.parametrize("case", sorted(CASES))
def test_transport_case_over_tcp(tcp_server, case):
    client = RawClient.tcp(tcp_server)
    try:
        assert "result" in client.initialize(OPTIONS)
        assert client.wait_loaded()["loaded"]
        CASES[case](client)
        still_serves(client)
    finally:
        client.close()


@pytest.mark.parametrize("loading", [False, True])
@pytest.mark.parametrize("shutdown_first, status", [(True, 0), (False, 1)])
def test_exit_status_follows_the_protocol(tmp_path, tiny_model_dir, loading, shutdown_first, status):
    """`loading`: an editor closed right after it opened a file. The load (reported as work-done
    progress) and a completion waiting for it are still running at `exit`. Their writes to the
    closed stdout once each failed, and pygls logged each failure with the chain of those before
    it: some 130,000 lines of tracebacks, and the process waited for the load."""
    client, proc = RawClient.stdio(tmp_path, *(("--model", str(tiny_model_dir), "--device", "cpu") if loading else ()))
    try:
        if loading:
            assert "result" in client.initialize(OPTIONS, capabilities={"window": {"workDoneProgress": True}})
            client.open("file:///tmp/closing.py", "def main():\n    \n")
            client.inline("file:///tmp/closing.py", 1, 4)
        else:
            assert "result" in client.initialize(initialized=False)   # no model load: not needed here
        if shutdown_first:
            client.call("shutdown")
        client.notify("exit")
        assert proc.wait(timeout=30) == status
    finally:
        stop(proc)
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log and len(log.splitlines()) < 20, log[-3000:]


def test_the_server_ends_with_the_client_process_initialize_named(tmp_path, tiny_model_dir):
    """LSP: a server whose client process has died exits. Here its stdin stays open (the test
    holds it, as a helper the editor forked would): it stayed, with its model, for as long as
    that lived. A pid that runs no process when it is named (the editor in another pid
    namespace) is not watched."""
    editor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    client, proc = RawClient.stdio(tmp_path, "--model", str(tiny_model_dir), "--device", "cpu")
    (tmp_path / "unseen").mkdir()
    unseen, other = RawClient.stdio(tmp_path / "unseen", "--device", "cpu")
    try:
        assert "result" in client.initialize(OPTIONS, process_id=editor.pid)
        assert "result" in unseen.initialize(initialized=False, process_id=2 ** 22 + 1)   # above pid_max
        assert client.wait_loaded()["loaded"]
        time.sleep(2 * CLIENT_POLL_S)
        assert proc.poll() is None                     # the editor lives: the server serves
        editor.kill()
        editor.wait()
        assert proc.wait(timeout=10 * CLIENT_POLL_S) == 0
        assert other.poll() is None and "result" in unseen.call("dllm/status", {})
    finally:
        editor.kill()
        stop(proc)
        stop(other)
    assert f"the client's process {editor.pid} has ended" in (tmp_path / "server.log").read_text()


def test_a_progress_token_accepted_late_is_no_error(tmp_path, tiny_model_dir):
    """A busy editor (VS Code activating its extensions) answered window/workDoneProgress/create
    after the server had given up on it: pygls set the answer on the cancelled request and the
    log got an ERROR with a traceback."""
    client, proc = RawClient.stdio(tmp_path, "--model", str(tiny_model_dir), "--device", "cpu")
    try:
        assert "result" in client.initialize(OPTIONS, capabilities={"window": {"workDoneProgress": True}})
        create = client.wait_for(lambda m: m.get("method") == "window/workDoneProgress/create")
        time.sleep(PROGRESS_CREATE_S + 1)
        client.send({"jsonrpc": "2.0", "id": create["id"], "result": None})
        assert client.wait_loaded()["loaded"] and "result" in client.call("dllm/status", {})
    finally:
        stop(proc)
    log = (tmp_path / "server.log").read_text()
    assert "ERROR" not in log and "Traceback" not in log, log[-3000:]
    assert "came after it was given up on" in log


def test_a_change_to_a_document_never_opened_reads_nothing_from_disk(tmp_path):
    """pygls' workspace fell back to the file a URI names: a didChange for a URI the client never
    opened made the server read that file (a FIFO hung it for every client)."""
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    client, proc = RawClient.stdio(tmp_path)
    try:
        assert "result" in client.initialize(initialized=False)
        for changes in ([], [{"text": "x = 1\n"}]):
            client.notify("textDocument/didChange", {"textDocument": {"uri": fifo.as_uri(), "version": 2},
                                                    "contentChanges": changes})
        assert "result" in client.call("dllm/status", {}, timeout=10)     # not stuck reading the FIFO
        # and the document is still not open: nothing was made of it
        answer = client.call("textDocument/inlineCompletion", {
            "textDocument": {"uri": fifo.as_uri()}, "position": {"line": 0, "character": 0},
            "context": {"triggerKind": 2}}, timeout=10)
        assert is_error(answer, -32602) and "not open" in answer["error"]["message"], answer
    finally:
        stop(proc)
    assert "which is not open: ignored" in (tmp_path / "server.log").read_text()


def test_ctrl_c_ends_a_stdio_server_with_status_130(tmp_path):
    # A job started in the background by a non-interactive shell (CI's, say) inherits SIGINT
    # ignored, and Python then installs no Ctrl-C handler: the server is started with SIGINT at
    # its default, as a terminal's foreground process has it.
    launcher = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                "os.execv(sys.executable, [sys.executable, '-m', 'dllm_lsp', 'serve', '--stdio', '--log-file', sys.argv[1]])")
    proc = subprocess.Popen([sys.executable, "-c", launcher, str(tmp_path / "server.log")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def write(data: bytes) -> None:
        proc.stdin.write(data)
        proc.stdin.flush()

    client = RawClient(write, lambda: os.read(proc.stdout.fileno(), 65536), proc.stdin.close)
    try:
        assert "result" in client.initialize(initialized=False)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130             # it was 0: a supervisor read a clean exit
    finally:
        stop(proc)


def test_shutdown_while_holes_are_filled(tmp_path, tiny_model_dir):
    """`shutdown` while dllm.fillHoles denoises (slowly: 200 steps): it is answered, the command is
    cancelled, the server refuses what follows, and `exit` ends it with status 0. Cancelling the
    command once broke pygls' walk over the pending requests: the shutdown failed with -32603."""
    client, proc = RawClient.stdio(tmp_path, "--model", str(tiny_model_dir), "--device", "cpu")
    try:
        assert "result" in client.initialize({"steps": 200, "threshold": 1.0, "maxSpanTokens": 200})
        assert client.wait_loaded()["loaded"]
        uri = "file:///tmp/holes.py"
        client.open(uri, "def f():\n    pass\n\ndef main():\n    pass\n")
        whole = {"start": {"line": 0, "character": 0}, "end": {"line": 5, "character": 0}}
        fill = client.start("workspace/executeCommand", {"command": "dllm.fillHoles", "arguments": [uri, whole]})
        time.sleep(0.3)
        shutdown = client.call("shutdown")
        assert "result" in shutdown and shutdown["result"] is None, shutdown
        answer = client.response(fill)
        assert is_error(answer, -32800) or "result" in answer, answer   # cancelled, unless it had finished
        assert is_error(client.call("dllm/status", {}), -32600)
        client.notify("exit")
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)


def test_messages_before_initialize(tmp_path):
    """LSP: a request before `initialize` gets ServerNotInitialized (-32002), a notification is
    dropped. Served anyway, the handlers failed with -32603 and a traceback."""
    client, proc = RawClient.stdio(tmp_path)
    try:
        uri = "file:///tmp/early.py"
        client.open(uri, "x = 1\n")                              # dropped: the document is not open later
        answer = client.response(client.inline(uri, 0, 5))
        assert is_error(answer, -32002) and "initialize" in answer["error"]["message"]
        assert is_error(client.call("dllm/status", {}), -32002)
        assert "result" in client.initialize(initialized=False)
        assert "result" in client.call("dllm/status", {})
        assert is_error(client.response(client.inline(uri, 0, 5)), -32602)   # "not open": its didOpen was dropped
        again = client.initialize({"steps": "bad"}, initialized=False)          # LSP: sent once
        assert is_error(again, -32600) and "already" in again["error"]["message"]
        client.shutdown_and_exit()
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)
    assert "Traceback" not in (tmp_path / "server.log").read_text()


def test_a_position_that_is_not_a_json_integer_is_invalid_params(tmp_path):
    """lsprotocol's converter read a line of 1.5, "1" or true as line 1 and completed there."""
    client, proc = RawClient.stdio(tmp_path)
    try:
        assert "result" in client.initialize()
        uri = "file:///tmp/positions.py"
        client.open(uri, "x = 1\ny = 2\n")
        for method in ("textDocument/inlineCompletion", "textDocument/completion", "dllm/inlineCompletion"):
            for line in (1.5, "1", True):
                answer = client.call(method, {"textDocument": {"uri": uri}, "context": {"triggerKind": 1},
                                              "position": {"line": line, "character": 0}})
                assert is_error(answer, -32602), (method, line, answer)
                assert "line must be an integer" in answer["error"]["message"], answer
            ok = client.call(method, {"textDocument": {"uri": uri}, "context": {"triggerKind": 1},
                                      "position": {"line": 1, "character": 0}})
            assert "result" in ok, (method, ok)
        client.shutdown_and_exit()
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)


@pytest.mark.parametrize("reply", [{"result": 5}, {"result": None}, {"result": {"applied": "yes"}},
                                   {"error": {"code": -32603, "message": "the editor broke"}}])
def test_a_reply_to_apply_edit_that_is_no_result_is_not_applied(tmp_path, reply):
    """A malformed reply to workspace/applyEdit was dropped by pygls and the command waited for
    ever; an error reply failed the command with InternalError and a traceback."""
    client, proc = RawClient.stdio(tmp_path)
    try:
        assert "result" in client.initialize()
        uri = "file:///tmp/apply.py"
        client.open(uri, "x = os.getcwd()\n")
        msg_id = client.start("workspace/executeCommand", {"command": "dllm.applyCompanionEdit",
                                                           "arguments": [uri, "import os"]})
        asked = client.wait_for(lambda m: m.get("method") == "workspace/applyEdit")
        client.send({"jsonrpc": "2.0", "id": asked["id"], **reply})
        answer = client.response(msg_id)
        assert answer["result"]["applied"] is False, answer
        assert "did not apply" in answer["result"]["reason"], answer
        client.shutdown_and_exit()
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)
    assert "Traceback" not in (tmp_path / "server.log").read_text()


def test_ordinary_client_errors_log_a_line_each_not_a_traceback(tmp_path):
    """Bad params of a standard request (answered -32602) and a $/cancelRequest whose id is an
    object or an array (dropped): pygls logged a screen of traceback for each."""
    client, proc = RawClient.stdio(tmp_path)
    try:
        assert "result" in client.initialize(initialized=False)
        uri = "file:///tmp/errors.py"
        client.open(uri, "x = 1\n")
        bad = client.call("textDocument/inlineCompletion", {"textDocument": {"uri": uri}, "context": {"triggerKind": 1},
                                                            "position": {"line": -1, "character": 0}})
        assert is_error(bad, -32602) and "position" in bad["error"]["message"]
        client.notify("$/cancelRequest", {"id": {"nested": 1}})
        client.notify("$/cancelRequest", {"id": [1]})
        assert "result" in client.call("dllm/status", {})
        client.shutdown_and_exit()
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log and "cancelRequest" in log, log[-3000:]


def test_requests_after_shutdown_are_refused_not_dropped(tmp_path):
    client, proc = RawClient.stdio(tmp_path)
    try:
        assert "result" in client.initialize(initialized=False)
        client.call("shutdown")
        assert is_error(client.call("dllm/status", {}), -32600)
        client.notify("exit")
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)


def test_notifications_leave_nothing_pending(tmp_path, tiny_model_dir):
    # pygls kept every didOpen / didChange / didClose future in its table of pending requests:
    # memory grew a keystroke at a time, and a client leaving was said to cancel thousands.
    proc, port = start_tcp_server(tmp_path, tiny_model_dir)
    try:
        client = RawClient.tcp(port)
        assert "result" in client.initialize(OPTIONS)
        uri = "file:///tmp/typed.py"
        client.open(uri, "")
        for version in range(2, 302):
            client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                     "contentChanges": [{"text": "x" * version}]})
        client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        assert "result" in client.call("dllm/status")
        log = tmp_path / "tcp.log"
        # This client's address: the last one logged as connected (wait_listening's probe came
        # first, and the server logs it only where it builds a language server for every connection).
        peer = [line for line in log.read_text().splitlines() if "client connected from" in line][-1].split("from ")[1]
        client.close()

        def ours() -> list[str]:
            return [line for line in log.read_text().splitlines() if f"client {peer} disconnected" in line]
        deadline = time.monotonic() + 30
        while not ours() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ours() and "pending" not in ours()[0], ours()
    finally:
        stop(proc)


def test_a_client_that_reads_no_answers_stops_being_read(tmp_path, tiny_model_dir):
    # Its answers piled up in the server without limit (~100 MiB per 250,000 of them).
    proc, port = start_tcp_server(tmp_path, tiny_model_dir)
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(frame({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}}))
        request = frame({"jsonrpc": "2.0", "id": 1, "method": "dllm/status"})
        sock.settimeout(5)
        # The server stops reading once 16 MiB of answers wait (~0.5 KB each: ~35,000 requests,
        # plus what the kernel holds of them). The flood must also outgrow what the kernel takes
        # in while the server reads nothing: its receive buffer, which Linux grows up to
        # tcp_rmem's maximum (32 MiB here) for a reader that was fast, and this socket's send
        # buffer. 200,000 requests (~14 MB) fitted there now and then, and the sends all went
        # through though the server had stopped reading; a million (~70 MB) do not.
        flood = 1_000_000
        sent = 0
        try:
            while sent < flood:
                sock.sendall(request * 100)
                sent += 100
        except (socket.timeout, OSError):
            pass
        assert sent < flood, "the server read every request of a client that reads nothing"
        sock.close()
        client = RawClient.tcp(port)     # the others are still served
        try:
            assert "result" in client.initialize(OPTIONS)
            assert "result" in client.call("dllm/status")
        finally:
            client.close()
    finally:
        stop(proc)

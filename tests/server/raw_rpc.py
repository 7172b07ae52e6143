"""A raw JSON-RPC client for the transport tests: writes exactly the bytes a test asks for (broken
frames included) to a real server subprocess over a pipe or a socket, and reads its frames on a
background thread, independently of pygls."""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dllm_lsp.net import free_port
from dllm_lsp.options import Options
from dllm_lsp.server.model_host import ModelHost
from dllm_lsp.server.tcp import serve_tcp
from tests.ports import wait_listening

TINY_PY = "def f(x):\n    return \n"


def frame(body: bytes | str | Any, header: bytes | None = None) -> bytes:
    if not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode("utf-8")
    if header is None:
        header = b"Content-Length: %d\r\n\r\n" % len(body)
    return header + body


class RawClient:
    def __init__(self, write, read, close) -> None:
        self._write, self._read, self._close = write, read, close
        self.inbox: queue.Queue = queue.Queue()
        self.other: list[Any] = []          # messages set aside while waiting for a given one
        self.closed = threading.Event()
        self._ids = itertools.count(1)
        threading.Thread(target=self._reader, daemon=True).start()

    # --- transports -------------------------------------------------------------------------
    @classmethod
    def stdio(cls, tmp_path: Path, *args: str) -> tuple["RawClient", subprocess.Popen]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dllm_lsp", "serve", "--stdio", "--log-file", str(tmp_path / "server.log"), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )

        def write(data: bytes) -> None:
            proc.stdin.write(data)
            proc.stdin.flush()

        return cls(write, lambda: os.read(proc.stdout.fileno(), 65536), proc.stdin.close), proc

    @classmethod
    def tcp(cls, port: int) -> "RawClient":
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.settimeout(None)

        def read() -> bytes:
            try:
                return sock.recv(65536)
            except OSError:
                return b""

        def close() -> None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

        client = cls(sock.sendall, read, close)
        client.sock = sock
        return client

    def close(self) -> None:
        self._close()

    # --- reading ----------------------------------------------------------------------------
    def _reader(self) -> None:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                chunk = self._read()
                if not chunk:
                    self.closed.set()
                    return
                buf += chunk
            head, _, rest = buf.partition(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            while len(rest) < length:
                chunk = self._read()
                if not chunk:
                    self.closed.set()
                    return
                rest += chunk
            self.inbox.put(json.loads(rest[:length]))
            buf = rest[length:]

    def wait_for(self, predicate, timeout: float = 30.0) -> Any:
        """The first message (looking at set-aside ones first) that satisfies `predicate`."""
        for index, message in enumerate(self.other):
            if predicate(message):
                return self.other.pop(index)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching message in {timeout}s; set aside: {self.other[-5:]}")
            try:
                message = self.inbox.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if predicate(message):
                return message
            self.other.append(message)

    def response(self, msg_id: Any, timeout: float = 30.0) -> dict:
        return self.wait_for(lambda m: isinstance(m, dict) and "method" not in m and m.get("id") == msg_id, timeout)

    # --- writing ----------------------------------------------------------------------------
    def raw(self, data: bytes) -> None:
        self._write(data)

    def send(self, message: Any) -> None:
        self._write(frame(message))

    def notify(self, method: str, params: Any = None) -> None:
        message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def request_id(self) -> int:
        return next(self._ids)

    def start(self, method: str, params: Any = None, msg_id: Any = None, omit_params: bool = False) -> Any:
        msg_id = self.request_id() if msg_id is None else msg_id
        message = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if not omit_params:
            message["params"] = params
        self.send(message)
        return msg_id

    def call(self, method: str, params: Any = None, timeout: float = 30.0, **kw) -> dict:
        return self.response(self.start(method, params, **kw), timeout)

    # --- LSP conveniences -------------------------------------------------------------------
    def initialize(self, options: dict | None = None, timeout: float = 60.0, initialized: bool = True,
                   capabilities: dict | None = None, process_id: int | None = None) -> dict:
        """`capabilities` defaults to declaring `workspace.applyEdit` (as editors do: the server
        sends workspace/applyEdit only to a client that declares it)."""
        if capabilities is None:
            capabilities = {"workspace": {"applyEdit": True}}
        answer = self.call("initialize", {"processId": process_id, "rootUri": None, "capabilities": capabilities,
                                          "initializationOptions": options or {}}, timeout=timeout)
        if "result" in answer and initialized:
            self.notify("initialized", {})
        return answer

    def wait_loaded(self, timeout: float = 90.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            status = self.call("dllm/status", timeout=timeout)["result"]
            if (status["loaded"] or status["error"]) and not status["loading"]:
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"model not loaded: {status}")
            time.sleep(0.1)

    def open(self, uri: str, text: str = TINY_PY, language: str = "python") -> None:
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": language, "version": 1,
                                                              "text": text}})

    def inline(self, uri: str, line: int = 1, character: int = 11, msg_id: Any = None) -> Any:
        return self.start("textDocument/inlineCompletion", {
            "textDocument": {"uri": uri}, "position": {"line": line, "character": character},
            "context": {"triggerKind": 1}}, msg_id=msg_id)

    def cancel(self, msg_id: Any) -> None:
        self.notify("$/cancelRequest", {"id": msg_id})

    def shutdown_and_exit(self, timeout: float = 30.0) -> None:
        self.call("shutdown", timeout=timeout)
        self.notify("exit")


@contextlib.contextmanager
def in_process_tcp_server(model_dir: Path, token: str | None = None):
    """`serve --tcp` (serve_tcp) on a free loopback port in a thread of this process, so a test can
    look at the server's objects; yields the port, and stops the server at the end."""
    port = free_port()
    loop = asyncio.new_event_loop()
    settings = Options().merged({"model": str(model_dir), "device": "cpu"})

    def serve() -> None:
        try:
            loop.run_until_complete(serve_tcp("127.0.0.1", port, settings, token, ModelHost()))
        except asyncio.CancelledError:   # the teardown below
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    wait_listening(port, timeout=30)
    try:
        yield port
    finally:
        loop.call_soon_threadsafe(lambda: [task.cancel() for task in asyncio.all_tasks(loop)])
        thread.join(10)

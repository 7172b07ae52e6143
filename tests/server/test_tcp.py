"""`dllm-lsp serve --tcp`: binds the loopback address unless told otherwise, and serves LSP."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest
from lsprotocol import types

from dllm_lsp.net import free_port
from tests.ports import listening_addresses, wait_listening

from .lsp_harness import inline_params, make_client, open_doc, wait_loaded
from .raw_rpc import RawClient

pytestmark = pytest.mark.timeout(180)


def keepalive_timers(port: int) -> list[float]:
    """Seconds left on the keepalive timer of each established connection the server holds on
    `port`, from /proc/net/tcp (timer kind 2 is keepalive; its time is in 1/100 s ticks). A
    connection without keepalive has no timer while idle: a peer that vanished stays for good."""
    found = []
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01" and int(fields[1].split(":")[1], 16) == port:
            kind, when = fields[5].split(":")
            found.append(int(when, 16) / 100 if int(kind, 16) == 2 else float("inf"))
    return found


async def connect(port: int):
    client, _ = make_client()
    await client.start_tcp("127.0.0.1", port)
    await client.initialize_async(types.InitializeParams(capabilities=types.ClientCapabilities()))
    client.initialized(types.InitializedParams())
    assert (await wait_loaded(client))["loaded"]
    return client


async def complete_once(client) -> str:
    uri = f"file:///tmp/t{id(client)}.py"
    open_doc(client, uri, "def f(x):\n    return \n")
    result = await client.text_document_inline_completion_async(inline_params(uri, 1, 11))
    return result.items[0].insert_text if result.items else ""


async def disconnect(client) -> None:
    await client.shutdown_async(None)
    client.exit(None)
    await asyncio.sleep(0.2)
    await client.stop()


async def test_tcp_server_binds_loopback_and_serves_many_clients(tmp_path, tiny_model_dir):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dllm_lsp", "serve", "--tcp", f":{port}", "--model", str(tiny_model_dir),
         "--device", "cpu", "--log-file", str(tmp_path / "tcp.log")],
    )
    try:
        wait_listening(port, proc, timeout=60, connect=False)   # on whatever address it binds
        assert listening_addresses(port) == {"127.0.0.1"}
        first = await connect(port)
        second = await connect(port)                     # a second client while the first is on
        await asyncio.sleep(0.3)                         # both idle: each has its keepalive timer running
        timers = keepalive_timers(port)
        assert len(timers) == 2 and all(t <= 60 for t in timers), timers
        assert await complete_once(first) and await complete_once(second)
        await disconnect(first)
        assert await complete_once(second), "one client leaving must not stop the others"
        await disconnect(second)
        third = await connect(port)                      # and clients keep coming afterwards
        status = await third.protocol.send_request_async("dllm/status", {})
        assert status.loaded
        assert await complete_once(third)
        await disconnect(third)
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_ctrl_c_during_a_model_load_exits_at_once(tmp_path):
    """The load (the 30M model: seconds; a 7B checkpoint: a minute) held Ctrl-C until it had
    finished, and each connected client left a traceback in the log."""
    port = free_port()
    log = tmp_path / "tcp.log"
    proc = subprocess.Popen([sys.executable, "-m", "dllm_lsp", "serve", "--tcp", f":{port}", "--model",
                             "dllm-embedded-30m", "--device", "cpu", "--log-file", str(log)])
    try:
        wait_listening(port, proc, timeout=60, connect=False)
        clients = [RawClient.tcp(port) for _ in range(2)]
        for client in clients:
            assert "result" in client.initialize({})
        while not clients[0].call("dllm/status", {})["result"]["loading"]:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        proc.kill()
        proc.wait()
    text = log.read_text()
    assert "interrupted: exiting" in text and "Traceback" not in text, text[-3000:]
    assert "loaded dllm-embedded-30m" not in text      # it did not wait for the load to finish

"""The shared TCP server under load, driven by raw JSON-RPC clients over sockets: concurrent
connects load the model once, a soak of a few hundred requests from 4 clients with cancels and
supersedes leaves nothing unanswered and memory flat, a client that leaves takes its work with
it, and a big document does not stall another client's `dllm/status` (docs/deploy.md, "Limits")."""
from __future__ import annotations

import threading
import time

import pytest

from dllm_lsp.server.protocol import MAX_DOCUMENT_CHARS

from .raw_rpc import RawClient
from .test_transport import OPTIONS, start_tcp_server, stop

pytestmark = pytest.mark.timeout(300)

# What docs/deploy.md promises about a big document (measured on the 2-core CI machine, tiny model).
STATUS_LATENCY_BOUND_S = 1.0
RSS_GROWTH_BOUND_KB = 64 * 1024

SOURCE = "import os\n\n\ndef area(width, height):\n    return \n\n\nprint(area(2, 3))\n"


def rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def connect(port: int, options: dict | None = None, capabilities: dict | None = None,
            initialized: bool = True) -> RawClient:
    client = RawClient.tcp(port)
    assert "result" in client.initialize(options or OPTIONS, capabilities=capabilities, initialized=initialized)
    return client


def run_threads(target, count: int) -> list:
    results: list = [None] * count
    errors: list = []

    def wrapped(i: int) -> None:
        try:
            results[i] = target(i)
        except BaseException as exc:   # surfaced in the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    if errors:
        raise errors[0]
    return results


def test_concurrent_connects_load_the_model_once(tmp_path, tiny_model_dir):
    proc, port = start_tcp_server(tmp_path, tiny_model_dir)
    try:
        # Each client accepts work-done progress, so each connection's load waits on its client
        # (a window in which the others connect): the load must still happen once.
        clients = run_threads(lambda i: connect(port, capabilities={"window": {"workDoneProgress": True}}), 4)
        creates = [c.wait_for(lambda m: isinstance(m, dict) and m.get("method") == "window/workDoneProgress/create")
                   for c in clients]
        time.sleep(0.5)
        for client, create in zip(clients, creates):
            client.send({"jsonrpc": "2.0", "id": create["id"], "result": None})
        statuses = run_threads(lambda i: clients[i].wait_loaded(), 4)
        assert all(s["loaded"] for s in statuses)
        for client in clients:
            client.close()
        log = (tmp_path / "tcp.log").read_text()
        assert log.count("loaded tiny on cpu in") == 1, log
    finally:
        stop(proc)


def test_soak_four_clients_with_cancels_and_supersedes(tmp_path, tiny_model_dir):
    proc, port = start_tcp_server(tmp_path, tiny_model_dir)
    rounds = 50
    try:
        clients = [connect(port) for _ in range(4)]
        assert clients[0].wait_loaded()["loaded"]

        def work(i: int, first: int, last: int) -> dict:
            client = clients[i]
            uri = f"file:///tmp/soak{i}.py"
            if first == 0:
                client.open(uri, SOURCE)
            sent, version, answers, owed = [], 1, {}, []
            for n in range(first, last):
                a = client.inline(uri, 4, 11)
                sent.append(a)
                if n % 4 == 1:
                    client.cancel(a)                       # cancelled at once
                if n % 4 == 2:
                    sent.append(client.inline(uri, 4, 11))  # supersedes the one just sent
                if n % 4 == 3:
                    owed.append(a)   # the last before the client waits: nothing cancels or supersedes it
                if n % 8 == 3:
                    sent.append(client.start("dllm/status", {}))
                    owed.append(sent[-1])
                if n % 10 == 9:
                    version += 1
                    client.notify("textDocument/didChange", {
                        "textDocument": {"uri": uri, "version": version},
                        "contentChanges": [{"text": SOURCE + f"# {n}\n"}]})
                if n % 2 == 1:   # keep a few requests in flight, not all of them
                    for msg_id in sent:
                        if msg_id not in answers:
                            answers[msg_id] = client.response(msg_id, timeout=60)
            for msg_id in sent:
                if msg_id not in answers:
                    answers[msg_id] = client.response(msg_id, timeout=60)
            return {"answers": answers, "owed": owed}

        warm = run_threads(lambda i: work(i, 0, 6), 4)
        before = rss_kb(proc.pid)
        answers = run_threads(lambda i: work(i, 6, 6 + rounds), 4)
        after = rss_kb(proc.pid)
        every = [a for per_client in warm + answers for a in per_client["answers"].values()]
        assert len(every) >= 200, len(every)
        codes = [a["error"]["code"] for a in every if "error" in a]
        unexpected = [a["error"] for a in every if "error" in a and a["error"]["code"] != -32800]
        assert not unexpected, unexpected[:3]           # cancelled or superseded, nothing else
        # Which of the others come back answered rather than superseded is a race between a
        # client's back-to-back sends and the server's steps; a request nothing cancelled or
        # superseded has no excuse.
        owed = [per_client["answers"][m] for per_client in warm + answers for m in per_client["owed"]]
        assert len(owed) >= 50 and all("result" in a for a in owed), [a for a in owed if "result" not in a][:3]
        assert after - before < RSS_GROWTH_BOUND_KB, (before, after)
        for client in clients:
            client.close()
        log = (tmp_path / "tcp.log").read_text()
        assert "Traceback" not in log
        print(f"soak: {len(every)} requests, {len(codes)} cancelled/superseded, {len(owed)} owed all answered, "
              f"RSS {before} -> {after} kB")
    finally:
        stop(proc)


def test_a_client_that_leaves_takes_its_work_with_it(tmp_path, tiny_model_dir):
    proc, port = start_tcp_server(tmp_path, tiny_model_dir)
    try:
        slow = {"steps": 64, "threshold": 1.0, "maxLineTokens": 64, "maxSpanTokens": 64}
        leaving, staying = connect(port, slow), connect(port)
        assert staying.wait_loaded()["loaded"]
        for n in range(6):
            leaving.open(f"file:///tmp/leaving{n}.py", SOURCE)
            leaving.inline(f"file:///tmp/leaving{n}.py", 4, 11)
        time.sleep(0.3)
        leaving.close()
        deadline = time.monotonic() + 30
        while "cancelled" not in (tmp_path / "tcp.log").read_text():
            assert time.monotonic() < deadline, "the disconnect cancelled nothing"
            time.sleep(0.05)
        staying.open("file:///tmp/staying.py", SOURCE)
        started = time.monotonic()
        assert "result" in staying.response(staying.inline("file:///tmp/staying.py", 4, 11))
        waited = time.monotonic() - started
        print(f"after a disconnect with 6 requests pending: the next client's completion took {waited:.3f}s")
        # Before: it waited for all six (over 30 s here); now at most one denoise step of theirs.
        # The bound is loose for a loaded 2-core machine (measured 0.06-1.4 s).
        assert waited < 5.0, f"the next client waited {waited:.2f}s behind work for a client that left"
        staying.close()
    finally:
        stop(proc)


@pytest.mark.parametrize("size", ["at_the_limit", "above_the_limit"])
def test_a_big_document_does_not_stall_another_clients_status(tmp_path, tiny_model_dir, size):
    proc, port = start_tcp_server(tmp_path, tiny_model_dir)
    try:
        heavy, light = connect(port), connect(port)
        assert light.wait_loaded()["loaded"]
        line = "value = compute(alpha, beta) + other_function(gamma)  # filler\n"
        count = MAX_DOCUMENT_CHARS // len(line) - 2 if size == "at_the_limit" else 5 * MAX_DOCUMENT_CHARS // len(line)
        text = line * count + "def f(x):\n    return \n"
        latencies: list[float] = []
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                started = time.monotonic()
                light.call("dllm/status", {}, timeout=60)
                latencies.append(time.monotonic() - started)
                time.sleep(0.02)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            time.sleep(0.2)
            uri = "file:///tmp/heavy.py"
            heavy.open(uri, text)
            for _ in range(3):
                answer = heavy.response(heavy.inline(uri, count + 1, 11), timeout=120)
                assert ("result" in answer) == (size == "at_the_limit"), answer   # above it: refused, saying why
            time.sleep(0.2)
        finally:
            done.set()
            poller.join(timeout=60)
        worst = max(latencies)
        print(f"{size}: {len(text) / 1024 / 1024:.1f} Mi chars, {len(latencies)} status calls, worst {worst:.3f}s")
        assert worst < STATUS_LATENCY_BOUND_S, f"status waited {worst:.2f}s behind a {len(text)}-character document"
        heavy.close()
        light.close()
    finally:
        stop(proc)

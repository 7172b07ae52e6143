"""Big documents and the caps of one connection, on the real server.

A large document is parsed off the event loop: another document's completion is answered while
it parses, and a completion on the large one, asked first, waits for its tree and then answers as
it does once the tree is there. A connection keeps at most MAX_OPEN_CHARS characters of documents
(documents.py): the one past it is refused, its requests answer RequestFailed saying why, the
client is told once, and a document reopened after another closed is kept again."""
from __future__ import annotations

import gc
import time
import weakref

from dllm_lsp.server.documents import MAX_OPEN_CHARS
from dllm_lsp.server.protocol import MAX_DOCUMENT_CHARS
from dllm_lsp.syntax.snapshot import MAX_TREE_BYTES

from . import test_connection_memory
from .raw_rpc import TINY_PY, RawClient
from .test_connection_memory import connected_server
from .test_line_ends import stop

tcp_port = test_connection_memory.tcp_port   # the fixture: the real serve_tcp, in this process

OPTIONS = {"steps": 2, "maxLineTokens": 8, "maxSpanTokens": 16}
UNIT = "def f{n}(values, scale):\n    total = 0\n    for v in values:\n        total += v * scale + {n}\n    return total\n\n\n"


def big_python(limit: int = MAX_TREE_BYTES - 1000) -> str:
    """Python just under the size that still gets a tree: ~0.5-1.5 s to parse on this CPU."""
    text, n = [], 0
    size = 0
    while size + len(UNIT) + 12 < limit:
        piece = UNIT.format(n=n)
        text.append(piece)
        size += len(piece)
        n += 1
    return "".join(text)


def is_answer(message, *ids) -> bool:
    return isinstance(message, dict) and "method" not in message and message.get("id") in ids


def tree_ready_logged(log_path, uri: str) -> bool:
    """documents.py logs when a just opened document's tree is ready (parsed in a worker thread)."""
    return any(f"the tree of {uri} " in line for line in log_path.read_text().splitlines())


def test_a_small_document_is_answered_while_a_big_one_parses(tmp_path, tiny_model_dir):
    client, proc = RawClient.stdio(tmp_path, "--model", str(tiny_model_dir), "--device", "cpu")
    log_path = tmp_path / "server.log"
    try:
        assert "result" in client.initialize(OPTIONS)
        assert client.wait_loaded()["loaded"]
        small = "file:///project/small.py"
        client.open(small)
        assert "result" in client.response(client.inline(small, 1, 11))   # the model's first run done
        big = big_python()
        # Two parse at once; the last of six starts when four are done.
        uris = [f"file:///project/generated{n}.py" for n in range(6)]
        for n, uri in enumerate(uris):
            client.open(uri, big.replace("def f0(", f"def g{n}("))
        # When didOpen parsed on the event loop, the request below was read only after all six
        # parses; now it is answered while the last one has not even started. (A status request:
        # it needs the loop and next to no Python, where a completion competes with the parsing
        # threads for the interpreter and, on a loaded machine, can take as long as they do.)
        status = client.call("dllm/status", {}, timeout=120)
        assert "result" in status, status
        assert not tree_ready_logged(log_path, uris[-1]), "the request waited for the big documents' parses"
        answer = client.response(client.inline(small, 1, 11), timeout=120)
        assert "result" in answer, answer
        deadline = time.monotonic() + 120
        while not tree_ready_logged(log_path, uris[-1]):
            assert time.monotonic() < deadline, "the big document was never parsed"
            time.sleep(0.1)
        # The tree a request on a big document sees is the tree of its text: asked while the
        # document's tree is still parsing (edited just before), it answers as the same request
        # once every parse is long done (the tiny model decodes greedily).
        line = big.count("\n", 0, big.index("return total", len(big) // 2))
        client.notify("textDocument/didChange", {"textDocument": {"uri": uris[0], "version": 2}, "contentChanges": [
            {"range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 0}}, "text": "    # edited\n"}]})
        during = client.response(client.inline(uris[0], line + 1, 4), timeout=120)
        assert "result" in during, during
        after = client.response(client.inline(uris[0], line + 1, 4), timeout=120)
        assert after["result"] == during["result"]
        client.shutdown_and_exit()
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)


def test_documents_past_the_connections_character_cap_are_refused_once_and_say_why(tmp_path, tiny_model_dir):
    client, proc = RawClient.stdio(tmp_path, "--model", str(tiny_model_dir), "--device", "cpu")
    try:
        assert "result" in client.initialize(OPTIONS)
        assert client.wait_loaded()["loaded"]
        size = MAX_DOCUMENT_CHARS - 1024          # each one under the per-document limit
        kept = MAX_OPEN_CHARS // size
        filler = "x = 1\n" * (size // 6)
        for n in range(kept):
            client.open(f"file:///project/data{n}.py", filler)
        refused = [f"file:///project/refused{n}.py" for n in range(2)]
        padded = TINY_PY + "# more\n" * (MAX_OPEN_CHARS - kept * len(filler))  # past the cap
        for uri in refused:
            client.open(uri, padded)
        told = client.wait_for(lambda m: isinstance(m, dict) and m.get("method") == "window/showMessage", timeout=60)
        assert "refused0.py is not kept" in told["params"]["message"]
        for uri in refused:
            answer = client.response(client.inline(uri, 1, 11))
            assert answer["error"]["code"] == -32803      # RequestFailed, as for a document too big
            assert "is not kept" in answer["error"]["message"] and "Mi characters" in answer["error"]["message"]
        # its edits are dropped quietly, and nothing else was shown
        client.notify("textDocument/didChange", {"textDocument": {"uri": refused[0], "version": 2},
                                                 "contentChanges": [{"text": TINY_PY + "\n"}]})
        client.call("dllm/status")
        assert not [m for m in client.other if isinstance(m, dict) and m.get("method") == "window/showMessage"]
        # a document closed gives its room back: the refused one, reopened, is kept
        client.notify("textDocument/didClose", {"textDocument": {"uri": "file:///project/data0.py"}})
        client.open(refused[0], padded)
        assert "result" in client.response(client.inline(refused[0], 1, 11))
        client.shutdown_and_exit()
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)


def test_a_gone_connections_documents_are_freed_at_once(tcp_port):
    """Without waiting for the cycle collector, which frees the connection's server (and so its
    documents) seconds or minutes later: the TCP close calls forget_all_documents."""
    client = RawClient.tcp(tcp_port)
    assert "result" in client.initialize({"steps": 2})
    uri = "file:///project/kept.py"
    client.open(uri, TINY_PY * 100)
    client.call("dllm/status")     # the didOpen before it has been handled
    server = connected_server()
    parsed = weakref.ref(server.trees._parsed[uri])
    server = None
    gc.disable()
    try:
        client.close()
        deadline = time.monotonic() + 30
        while parsed() is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert parsed() is None, "the gone connection's documents waited for the cycle collector"
    finally:
        gc.enable()


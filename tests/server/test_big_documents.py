"""Big documents and the caps of one connection, on the real server.

A large document is parsed off the event loop: another document's completion is answered while
it parses, and a completion on the large one, asked first, waits for its tree and then answers as
it does once the tree is there. A connection keeps at most MAX_OPEN_CHARS characters of documents
(documents.py): the one past it is refused, its requests answer RequestFailed saying why, the
client is told once, and a document reopened after another closed is kept again."""
from __future__ import annotations

import contextlib
import gc
import os
import time
import weakref

from dllm_lsp.server.documents import MAX_OPEN_CHARS
from dllm_lsp.server.protocol import MAX_DOCUMENT_CHARS
from dllm_lsp.syntax.document import SYNC_PARSE_BYTES
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


SMALL = "file:///project/small.py"


def ready_with_a_small_document(client: RawClient) -> str:
    """Initialize, load the model and complete once in a small document (the model's first run,
    with its warm-up, done before the test's own requests); its uri."""
    assert "result" in client.initialize(OPTIONS)
    assert client.wait_loaded()["loaded"]
    client.open(SMALL)
    assert "result" in client.response(client.inline(SMALL, 1, 11))
    return SMALL


def test_a_small_document_is_answered_while_a_big_one_parses(tmp_path, tiny_model_dir):
    client, proc = RawClient.stdio(tmp_path, "--model", str(tiny_model_dir), "--device", "cpu")
    log_path = tmp_path / "server.log"
    try:
        small = ready_with_a_small_document(client)
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



MEDIUM_PY = big_python(4 * SYNC_PARSE_BYTES)   # parsed in a worker thread, quickly


@contextlib.contextmanager
def parses_held(client: RawClient, uris: list[str]):
    """Edit each of the (open, large) documents and hold its next parse until the block ends: a
    parse that takes as long as the test needs, with no clock. Each document's parses take its
    lock (TreeSlot), which the test takes first, once the background parse of the opened text
    is done; the edit then leaves the current version unparsed."""
    client.call("dllm/status")                      # the didOpens before it are handled
    server = connected_server()
    documents = [server.trees._parsed[uri] for uri in uris]
    deadline = time.monotonic() + 60
    while not all(d.last_slot.done for d in documents):
        assert time.monotonic() < deadline, "the opened documents were never parsed"
        time.sleep(0.05)
    held = []
    try:
        for document, uri in zip(documents, uris):
            document._lock.acquire()
            held.append(document._lock)
            client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [
                {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": "#\n"}]})
        client.call("dllm/status")                  # the edits are handled: their versions wait for a parse
        assert not any(d.last_slot.done for d in documents)
        yield
    finally:
        for lock in held:
            lock.release()


def test_a_small_documents_completion_waits_for_no_big_documents_parse(tcp_port):
    """A completion on a big document waits for its tree. It waited in a worker of asyncio's
    default pool (min(32, cores + 4) of them), where every completion is planned: with as many
    big documents parsing, a small document's completion was answered only after their parses."""
    client = RawClient.tcp(tcp_port)
    try:
        small = ready_with_a_small_document(client)
        uris = [f"file:///project/big{n}.py" for n in range(min(32, (os.cpu_count() or 1) + 4) + 1)]
        for n, uri in enumerate(uris):
            client.open(uri, MEDIUM_PY.replace("def f0(", f"def g{n}("))
        with parses_held(client, uris):
            waiting = [client.inline(uri, 2, 13) for uri in uris]
            answer = client.response(client.inline(small, 1, 11), timeout=60)
            assert "result" in answer, answer
            assert not any(is_answer(m, *waiting) for m in client.other), "a big document's tree was ready"
        for msg_id in waiting:                      # and each, once its tree is parsed
            assert "result" in client.response(msg_id, timeout=120)
    finally:
        client.close()


def test_code_actions_on_a_big_document_are_listed_off_the_event_loop(tcp_port):
    """The fill-holes code action looked for holes on the event loop: for a big document still
    parsing, every message of every client waited for the parse (an editor asks for code actions
    at each cursor move)."""
    client = RawClient.tcp(tcp_port)
    try:
        assert "result" in client.initialize(OPTIONS)
        uri = "file:///project/holes.py"
        client.open(uri, "def hole(x):\n    pass  # TODO\n\n\n" + MEDIUM_PY)
        with parses_held(client, [uri]):            # the edit puts `#\n` first: the hole is on line 2
            listing = client.start("textDocument/codeAction", {
                "textDocument": {"uri": uri}, "context": {"diagnostics": []},
                "range": {"start": {"line": 2, "character": 0}, "end": {"line": 3, "character": 0}}})
            status = client.call("dllm/status", {}, timeout=60)
            assert "result" in status, status
            assert not any(is_answer(m, listing) for m in client.other), "the tree was ready"
        actions = client.response(listing, timeout=60)["result"]
        assert [a["title"] for a in actions] == ["Fill 1 hole with dllm"], actions
    finally:
        client.close()


def test_the_add_import_command_on_a_big_document_runs_off_the_event_loop(tcp_port):
    """dllm.applyCompanionEdit looked for the import block in the tree on the event loop: an editor
    runs it just after inserting the accepted completion, an edit that leaves a big document's
    tree to parse, and every message of every client waited for that parse. The edit is placed in
    the version the command was asked on, however the user typed on meanwhile."""
    client = RawClient.tcp(tcp_port)
    try:
        versioned = {"workspace": {"workspaceEdit": {"documentChanges": True}}}   # no applyEdit: the edit is answered
        assert "result" in client.initialize(OPTIONS, capabilities=versioned)
        uri = "file:///project/imports.py"
        client.open(uri, "import os\n\n\n" + MEDIUM_PY)
        with parses_held(client, [uri]):            # the edit puts `#\n` first: the import goes on line 2
            adding = client.start("workspace/executeCommand", {
                "command": "dllm.applyCompanionEdit", "arguments": [uri, "import sys"]})
            status = client.call("dllm/status", {}, timeout=60)
            assert "result" in status, status
            assert not any(is_answer(m, adding) for m in client.other), "the tree was ready"
            client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 3}, "contentChanges": [
                {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "text": "# on\n"}]})
        answer = client.response(adding, timeout=60)["result"]
        assert answer["applied"] is False and "workspace.applyEdit" in answer["reason"], answer
        [change] = answer["edit"]["documentChanges"]
        assert change["textDocument"] == {"uri": uri, "version": 2}
        assert change["edits"] == [{"range": {"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 0}},
                                    "newText": "import sys\n"}]
    finally:
        client.close()

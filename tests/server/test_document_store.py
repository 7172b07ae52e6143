"""The server's parsed documents: other documents come most recently opened or changed first,
which is the order the planner takes snippets in (it looks at the first SNIPPET_DOCUMENTS); a large
document is parsed in a worker thread, one version per snapshot; a connection's caps."""
import pytest
from lsprotocol import types

from dllm_lsp.server import documents
from dllm_lsp.server.documents import DocumentTrees, LspWorkspace
from dllm_lsp.server.errors import RequestFailed
from dllm_lsp.server.positions import LspTextDocument
from dllm_lsp.syntax.document import SYNC_PARSE_BYTES
from dllm_lsp.syntax.snapshot import Snapshot


def test_other_documents_come_most_recently_opened_or_changed_first():
    trees = DocumentTrees()
    for name in ("a", "b", "c", "d"):
        trees.open(f"file:///{name}.py", "python", f"{name} = 1\n")
    assert [uri for uri, _ in trees.others("file:///d.py")] == ["file:///c.py", "file:///b.py", "file:///a.py"]
    current = LspTextDocument("file:///a.py", "a = 1\n")
    change = types.TextDocumentContentChangePartial(range=types.Range(types.Position(0, 4), types.Position(0, 5)),
                                                    text="2")
    current.apply_change(change)
    trees.change("file:///a.py", [change], current)
    assert trees.others("file:///d.py") == [("file:///a.py", "a = 2\n"), ("file:///c.py", "c = 1\n"),
                                            ("file:///b.py", "b = 1\n")]
    trees.open("file:///b.py", "python", "b = 3\n")          # opened again: most recent
    trees.close("file:///c.py")
    assert [uri for uri, _ in trees.others("file:///a.py")] == ["file:///b.py", "file:///d.py"]


def test_a_uri_spelled_with_and_without_percent_escapes_is_one_document_as_in_pygls():
    """pygls keys documents by the percent-decoded URI; the parsed copies were keyed as spelled,
    so two spellings gave two texts here and one there, and a request read the other's tree."""
    workspace = LspWorkspace(None)
    trees = DocumentTrees()
    for uri, text in (("file:///tmp/caf%C3%A9.py", "a = 1\n"), ("file:///tmp/café.py", "b = 2\n")):
        workspace.put_text_document(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
        trees.open(uri, "python", text)
    for uri in ("file:///tmp/caf%C3%A9.py", "file:///tmp/café.py"):
        snapshot, document, _ = trees.get(uri, workspace)
        assert snapshot.text == document.source == "b = 2\n"
    trees.close("file:///tmp/café.py")
    assert trees.text_of("file:///tmp/caf%C3%A9.py") is None


# --- big documents and the connection's caps --------------------------------------------------

BIG = "".join(f"def f{n}(values):\n    return [v * {n} for v in values]\n\n\n" for n in range(12_000))


def partial(line: int, start: int, end: int, text: str) -> types.TextDocumentContentChangePartial:
    return types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(line, start), types.Position(line, end)), text=text)


def test_a_big_document_is_parsed_in_the_background_and_edits_during_the_parse_keep_one_version():
    """didOpen and didChange hand the parse of a large document to a worker thread and return;
    the snapshot a request takes is of the text as it is then, and its tree, however it was
    reached (edits recorded on a tree still being parsed), equals a fresh parse of that text."""
    assert len(BIG.encode()) > 8 * SYNC_PARSE_BYTES
    workspace = LspWorkspace(None)
    trees = DocumentTrees()
    uri = "file:///big.py"
    workspace.put_text_document(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=BIG))
    trees.open(uri, "python", BIG)
    snapshots = [trees.get(uri, workspace)[0]]
    for version, change in enumerate([partial(1, 4, 4, "x = 1; "), partial(0, 0, 0, "import os\n"),
                                       partial(7, 0, 3, "print((")], start=2):
        document = workspace.get_text_document(uri)
        document.apply_change(change)
        trees.change(uri, [change], document)
        snapshots.append(trees.get(uri, workspace)[0])
    latest = snapshots[-1]
    assert latest.text == workspace.get_text_document(uri).source
    texts = [s.text for s in snapshots]
    assert len(set(texts)) == len(texts)
    for snapshot in reversed(snapshots):
        assert str(snapshot.tree.root_node) == str(Snapshot.parse(snapshot.text, "python").root)


def test_the_background_parse_fills_the_latest_snapshot():
    trees = DocumentTrees()
    trees.open("file:///big.py", "python", BIG)
    parsed = trees._parsed["file:///big.py"]
    slot = parsed.pending
    assert slot is not None
    future = documents.parse_soon(parsed)   # the one didOpen started is queued or running too
    future.result(60)
    assert slot.done


def test_documents_past_the_connections_caps_are_refused_with_the_reason():
    workspace = LspWorkspace(None)
    trees = DocumentTrees(max_documents=2, max_chars=100)
    assert trees.open("file:///a.py", "python", "a = 1\n") is None
    assert trees.open("file:///b.py", "python", "b = 1\n") is None
    reason = trees.open("file:///c.py", "python", "c = 1\n")
    assert reason is not None and "2 documents" in reason
    with pytest.raises(RequestFailed, match="2 documents are open"):   # as for a document too big
        trees.get("file:///c.py", workspace)
    trees.close("file:///a.py")
    reason = trees.open("file:///c.py", "python", "c" * 95)   # 6 + 95 characters > 100
    assert reason is not None and "past 100 characters (6 open)" in reason
    assert trees.refused("file:///c.py") == reason
    assert trees.open("file:///c.py", "python", "c = 2\n") is None     # reopened, smaller: kept
    assert trees.refused("file:///c.py") is None
    assert [u for u, _ in trees.others("x")] == ["file:///c.py", "file:///b.py"]


def test_an_edit_past_the_total_character_cap_refuses_the_document():
    trees = DocumentTrees(max_chars=40)
    uri = "file:///a.py"
    trees.open(uri, "python", "a = 1\n")
    document = LspTextDocument(uri, "a = 1\n")
    change = partial(0, 5, 5, "0" * 50)
    document.apply_change(change)
    reason = trees.change(uri, [change], document)
    assert reason is not None and trees.text_of(uri) is None and trees.refused(uri) == reason
    assert trees.open("file:///b.py", "python", "b" * 39) is None   # its characters were given back


def test_forget_all_drops_every_document():
    trees = DocumentTrees()
    for name in "abc":
        trees.open(f"file:///{name}.py", "python", f"{name} = 1\n")
    trees.forget_all()
    assert trees.uris == [] and trees.others("x") == []
    assert trees.open("file:///d.py", "python", "d" * 100) is None

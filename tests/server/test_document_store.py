"""The server's parsed documents: other documents come most recently opened or changed first,
which is the order the planner takes snippets in (it looks at the first SNIPPET_DOCUMENTS)."""
from lsprotocol import types

from dllm_lsp.server.documents import DocumentTrees, LspWorkspace
from dllm_lsp.server.positions import LspTextDocument


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

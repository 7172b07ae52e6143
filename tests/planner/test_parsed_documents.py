"""ParsedDocument: incremental edits keep the tree equal to a fresh parse, across languages,
non-ASCII text (bytes vs characters) and many edits; bad edits are refused with a message."""
import random

import pytest

from dllm_lsp.syntax import snapshot as documents
from dllm_lsp.syntax.document import ParsedDocument

SOURCES = {
    "python": 'def naïve(x):\n    """Ünïcode ✓ docstring."""\n    if x:\n        return "日本語"\n    return None\n',
    "javascript": 'function f(a) {\n  const s = "ß→";\n  return a + s.length;\n}\n',
    "typescript": "interface P { name: string }\nconst p: P = { name: 'Zoë' };\n",
    "typescriptreact": "const C = () => <div title=\"é\">{1}</div>;\n",
    "rust": 'fn main() {\n    let s = "ñ";\n    println!("{}", s);\n}\n',
    "go": 'package main\n\nfunc main() {\n\ts := "€"\n\t_ = s\n}\n',
    "c": 'int main(void) {\n    char *s = "µ";\n    return 0;\n}\n',
    "cpp": '#include <string>\nint main() { std::string s = "ü"; return 0; }\n',
    "java": 'class A {\n    String s = "ø";\n    int f() { return 1; }\n}\n',
    "lua": 'local t = { "ä", 2 }\nfunction f(x)\n  return x\nend\n',
}
SNIPPETS = ["x", " ", "\n", "é", "(", ")", "{", "}", "\"", "ab\ncd", "日本", "return 1;", "\t", "🙂", ""]


def fresh_sexp(text: str, language_id: str) -> str:
    return str(ParsedDocument(text, language_id).tree.root_node)


@pytest.mark.parametrize("language_id", sorted(SOURCES))
def test_many_random_edits_match_a_fresh_parse(language_id):
    rng = random.Random(language_id)
    doc = ParsedDocument(SOURCES[language_id], language_id)
    expected = SOURCES[language_id]
    for step in range(60):
        start = rng.randint(0, len(expected))
        end = min(len(expected), start + rng.choice([0, 0, 1, 2, 5]))
        new = rng.choice(SNIPPETS)
        doc.edit(start, end, new)
        expected = expected[:start] + new + expected[end:]
        assert doc.text == expected
        if step % 10 == 9:
            assert str(doc.tree.root_node) == fresh_sexp(expected, language_id)
            assert doc.tree.root_node.end_byte == len(expected.encode("utf-8"))
    assert str(doc.tree.root_node) == fresh_sexp(expected, language_id)


LINE_END_PIECES = ["\r", "\n", "\r\n", "x", " ", "def f(a):", "    return a", "é", "(", ")", ""]


@pytest.mark.parametrize("seed", range(4))
def test_edits_that_split_and_join_line_ends_match_a_fresh_parse(seed):
    """A lone `\r` is a line end to the parser too (given as `\n`): typing or deleting the `\n`
    of a CRLF turns its `\r` into a lone one or back, outside the edited range."""
    rng = random.Random(seed)
    text = "".join(rng.choice(LINE_END_PIECES) for _ in range(30))
    doc = ParsedDocument(text, "python")
    for _ in range(80):
        start = rng.randint(0, len(text))
        end = min(len(text), start + rng.choice([0, 1, 2, 3]))
        new = "".join(rng.choice(LINE_END_PIECES) for _ in range(rng.randint(0, 2)))
        doc.edit(start, end, new, reparse=rng.random() < 0.5)
        text = text[:start] + new + text[end:]
        fresh = documents.Snapshot.parse(text, "python")
        assert doc.snapshot.data == fresh.data and str(doc.tree.root_node) == str(fresh.root)


def test_a_file_with_lone_carriage_returns_parses_line_by_line():
    """Classic Mac line ends: tree-sitter-python read the file as one line, with the `return`
    outside its function."""
    snapshot = documents.Snapshot.parse("def f(val):\r    t = val + 1\r    return val\r", "python")
    assert snapshot.error_count() == 0
    function = snapshot.root.children[0]
    assert function.type == "function_definition" and "return val" in snapshot.node_text(function)
    assert snapshot.point(snapshot.text.index("return")) == (2, 4)


def test_edit_converts_character_offsets_to_bytes():
    doc = ParsedDocument('s = "日本"\nx = 1\n', "python")
    doc.edit(doc.text.index("x"), doc.text.index("x") + 1, "ÿ")   # offset after 2 three-byte characters
    assert doc.text == 's = "日本"\nÿ = 1\n'
    node = doc.tree.root_node.children[1]
    assert node.start_point == (1, 0)
    assert node.text.decode() == "ÿ = 1"
    assert str(doc.tree.root_node) == fresh_sexp(doc.text, "python")


def test_deferred_reparse_batches_edits():
    doc = ParsedDocument("a = 1\n", "python")
    for i, ch in enumerate("b = 2\n"):
        doc.edit(6 + i, 6 + i, ch, reparse=False)
    assert doc.text == "a = 1\nb = 2\n"
    assert str(doc.tree.root_node) == fresh_sexp(doc.text, "python")


def test_snapshots_are_not_changed_by_later_edits():
    doc = ParsedDocument("x = 1\n", "python")
    before = doc.snapshot
    sexp = str(before.tree.root_node)
    doc.edit(0, 0, "def f(:\n")
    assert before.text == "x = 1\n"
    assert str(before.tree.root_node) == sexp and before.tree.root_node.end_byte == 6
    assert doc.tree.root_node.has_error


def test_unknown_language_has_no_tree_but_edits_text():
    doc = ParsedDocument("hello\n", "cobol")
    assert doc.tree is None and doc.language is None
    doc.edit(5, 5, " world")
    assert doc.text == "hello world\n"


def test_huge_document_falls_back_to_text(monkeypatch):
    monkeypatch.setattr(documents, "MAX_TREE_BYTES", 1000)
    big = "x = 1\n" * 400   # 2,400 bytes
    doc = ParsedDocument(big, "python")
    assert doc.tree is None
    doc.edit(0, len(big) - 60, "")   # shrinks below the limit: parsed again from scratch
    assert doc.tree is not None and str(doc.tree.root_node) == fresh_sexp(doc.text, "python")


def test_lone_surrogate_does_not_crash():
    doc = ParsedDocument("x = '\ud800'\n", "python")
    doc.edit(0, 1, "y")
    assert doc.text.startswith("y = ")
    assert doc.tree is not None


@pytest.mark.parametrize("start, end", [(-1, 0), (0, 99), (3, 2), (0.5, 1), ("0", 1)])
def test_bad_edit_range_is_refused(start, end):
    doc = ParsedDocument("x = 1\n", "python")
    with pytest.raises(ValueError, match="outside the document"):
        doc.edit(start, end, "y")
    assert doc.text == "x = 1\n"


def test_bad_types_are_refused():
    with pytest.raises(TypeError, match="document text"):
        ParsedDocument(b"x", "python")
    with pytest.raises(TypeError, match="edit text"):
        ParsedDocument("x", "python").edit(0, 0, None)


def test_keystroke_in_a_large_file_is_not_a_parse_from_scratch():
    """5,000 lines: an edit reuses the old tree, so it costs a fraction of a fresh parse
    (about 1 ms against 25+ ms here; the bound is loose because CI shares its cores)."""
    import time

    text = "".join(f"def function_{i}(a, b):\n    return a * {i} + b\n\n" for i in range(1700))
    assert text.count("\n") > 5000
    start = time.perf_counter()
    doc = ParsedDocument(text, "python")
    doc.tree   # noqa: B018 - a large document is parsed when its tree is read
    fresh = time.perf_counter() - start
    middle = text.index("return a * 850") + 6
    edits = []
    for _ in range(5):
        start = time.perf_counter()
        doc.edit(middle, middle, "x")
        doc.tree   # noqa: B018
        edits.append(time.perf_counter() - start)
    assert min(edits) < fresh / 3, (min(edits), fresh)
    assert str(doc.tree.root_node) == fresh_sexp(doc.text, "python")

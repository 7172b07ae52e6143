"""languageId and file-name mapping to the grammar wheels."""
import pytest
import tree_sitter

from dllm_lsp.syntax.languages import grammar_for, language_id_for_path, parser_for


@pytest.mark.parametrize("language_id, name", [
    ("python", "python"), ("javascript", "javascript"), ("javascriptreact", "javascript"),
    ("typescript", "typescript"), ("typescriptreact", "tsx"), ("rust", "rust"), ("go", "go"),
    ("c", "c"), ("cpp", "cpp"), ("java", "java"), ("lua", "lua"), ("Python", "python"), ("tsx", "tsx"),
])
def test_grammar_for_supported_ids(language_id, name):
    language = grammar_for(language_id)
    assert isinstance(language, tree_sitter.Language)
    assert grammar_for(language_id) is language   # cached
    # The grammar really is that language: a construct only it parses cleanly.
    sample = {"python": b"def f(x):\n    return x\n", "javascript": b"const f = (x) => x;\n",
              "typescript": b"let x: number = 1;\n", "tsx": b"const a = <div>{x}</div>;\n",
              "rust": b"fn f(x: i32) -> i32 { x }\n", "go": b"package m\nfunc f() {}\n",
              "c": b"int f(void) { return 0; }\n", "cpp": b"namespace a { class B {}; }\n",
              "java": b"class A { int f() { return 1; } }\n", "lua": b"local function f(x) return x end\n"}[name]
    tree = parser_for(language_id).parse(sample)
    assert not tree.root_node.has_error


@pytest.mark.parametrize("language_id", ["plaintext", "markdown", "cobol", ""])
def test_unknown_ids_have_no_grammar(language_id):
    assert grammar_for(language_id) is None
    assert parser_for(language_id) is None


def test_grammar_for_refuses_non_strings():
    with pytest.raises(TypeError, match="language id"):
        grammar_for(None)


@pytest.mark.parametrize("path, language_id", [
    ("a/b.py", "python"), ("x.PYI", "python"), ("app.js", "javascript"), ("m.mjs", "javascript"),
    ("c.jsx", "javascriptreact"), ("t.ts", "typescript"), ("c.tsx", "typescriptreact"), ("main.rs", "rust"),
    ("main.go", "go"), ("a.c", "c"), ("a.h", "c"), ("a.cpp", "cpp"), ("a.hpp", "cpp"), ("a.cc", "cpp"),
    ("A.java", "java"), ("init.lua", "lua"), ("README", "plaintext"), ("notes.md", "plaintext"),
])
def test_language_id_for_path(path, language_id):
    assert language_id_for_path(path) == language_id

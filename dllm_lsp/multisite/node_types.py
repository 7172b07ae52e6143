"""Tree-sitter helpers shared by the multi-site features, in Python string offsets.

tree-sitter counts UTF-8 bytes; the LSP layer and the engine count string characters, so
`Source` converts between the two once per parsed text.
"""
from __future__ import annotations

from collections.abc import Iterator

import tree_sitter

from dllm_lsp.planner.languages import language_name, parser_for

# Node types that open a scope for the names declared in them (functions, lambdas, methods).
FUNCTION_TYPES = frozenset({
    "function_definition", "lambda",                                   # python
    "function_declaration", "function_expression", "arrow_function",  # js / ts
    "method_definition", "generator_function_declaration", "function",
    "function_item", "closure_expression",                             # rust
    "method_declaration", "func_literal",                              # go / java
    "constructor_declaration",
})

# Parameter lists, per grammar.
PARAMETER_LIST_TYPES = frozenset({
    "parameters", "lambda_parameters", "formal_parameters", "parameter_list", "closure_parameters",
})

CALL_TYPES = frozenset({"call", "call_expression", "method_invocation"})
ARGUMENT_LIST_TYPES = frozenset({"argument_list", "arguments"})
COMMENT_TYPES = frozenset({"comment", "line_comment", "block_comment"})
IDENTIFIER_TYPES = frozenset({"identifier"})


class Source:
    """Text, its UTF-8 bytes and its tree (None when the language has no grammar)."""

    def __init__(self, text: str, language_id: str, tree: tree_sitter.Tree | None = None) -> None:
        """`tree`, when given, must be the tree of exactly `text` (saves a parse)."""
        if not isinstance(text, str):
            raise TypeError(f"document text must be a string, got {type(text).__name__}")
        self.text = text
        self.language_id = language_id
        self.language = language_name(language_id)
        self.data = text.encode("utf-8", errors="surrogatepass")
        parser = parser_for(language_id)
        if tree is None and parser is not None:
            tree = parser.parse(self.data)
        self.tree: tree_sitter.Tree | None = tree if parser is not None else None
        self._ascii = text.isascii()
        self._errors: int | None = None

    @property
    def root(self) -> tree_sitter.Node:
        if self.tree is None:
            raise ValueError(f"no tree-sitter grammar for language {self.language_id!r}")
        return self.tree.root_node

    def byte(self, offset: int) -> int:
        if self._ascii:
            return offset
        return len(self.text[:offset].encode("utf-8", errors="surrogatepass"))

    def char(self, byte: int) -> int:
        if self._ascii:
            return byte
        return len(self.data[:byte].decode("utf-8", errors="surrogatepass"))

    def start(self, node: tree_sitter.Node) -> int:
        return self.char(node.start_byte)

    def end(self, node: tree_sitter.Node) -> int:
        return self.char(node.end_byte)

    def node_text(self, node: tree_sitter.Node) -> str:
        return self.text[self.start(node):self.end(node)]

    def smallest_node(self, start: int, end: int) -> tree_sitter.Node:
        return self.root.descendant_for_byte_range(self.byte(start), self.byte(end))

    def error_count(self) -> int:
        if self._errors is None:
            self._errors = error_count(self.tree) if self.tree is not None else 0
        return self._errors


def reparsed(base: Source, text: str, start: int, base_end: int, text_end: int) -> Source:
    """`text` parsed incrementally from `base`'s tree: the two differ only in
    base.text[start:base_end] versus text[start:text_end]. Comparing a document with its
    earlier versions so costs a small reparse per version, not a full parse."""
    if base.tree is None:
        return Source(text, base.language_id)
    start_byte = base.byte(start)
    old_end_byte = base.byte(base_end)
    inserted = text[start:text_end].encode("utf-8", errors="surrogatepass")
    tree = base.tree.copy()
    start_point = point(base.text, start)
    line_start = text.rfind("\n", 0, text_end) + 1
    column = len(text[max(line_start, 0):text_end].encode("utf-8", errors="surrogatepass"))
    tree.edit(
        start_byte=start_byte, old_end_byte=old_end_byte, new_end_byte=start_byte + len(inserted),
        start_point=start_point, old_end_point=point(base.text, base_end),
        new_end_point=(text.count("\n", 0, text_end), column),
    )
    data = text.encode("utf-8", errors="surrogatepass")
    return Source(text, base.language_id, parser_for(base.language_id).parse(data, tree))


def point(text: str, offset: int) -> tuple[int, int]:
    """(row, UTF-8 byte column) of a string offset."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset), len(text[line_start:offset].encode("utf-8", errors="surrogatepass"))


def walk(node: tree_sitter.Node) -> Iterator[tree_sitter.Node]:
    """Every node under `node` (itself included), in document order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def error_count(tree: tree_sitter.Tree) -> int:
    """ERROR and MISSING nodes in the tree: a fill may not add any. Only subtrees that
    report an error are visited."""
    count, stack = 0, [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            count += 1
        stack.extend(c for c in node.children if c.has_error or c.is_missing)
    return count


def word_nodes(source: Source, word: str, start: int = 0, end: int | None = None) -> Iterator[tree_sitter.Node]:
    """The nodes spelled exactly `word` in [start, end), found by searching the text (str.find
    is fast even in large files) rather than by walking the tree."""
    text = source.text
    end = len(text) if end is None else end
    at = text.find(word, start, end)
    while at != -1:
        after = at + len(word)
        if (at == 0 or not is_word_char(text[at - 1])) and (after == len(text) or not is_word_char(text[after])):
            node = source.smallest_node(at, after)
            if source.start(node) == at and source.end(node) == after:
                yield node
        at = text.find(word, after, end)


def is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def ancestors(node: tree_sitter.Node) -> Iterator[tree_sitter.Node]:
    current = node.parent
    while current is not None:
        yield current
        current = current.parent


def enclosing(node: tree_sitter.Node, types: frozenset[str]) -> tree_sitter.Node | None:
    for parent in ancestors(node):
        if parent.type in types:
            return parent
    return None


def field_name(node: tree_sitter.Node) -> str | None:
    parent = node.parent
    if parent is None:
        return None
    for index, child in enumerate(parent.children):
        if child.id == node.id:
            return parent.field_name_for_child(index)
    return None


def is_identifier_text(text: str) -> bool:
    return text.isidentifier()

"""Tree-sitter helpers shared by the multi-site features, in Python string offsets.

tree-sitter counts UTF-8 bytes; the LSP layer and the engine count string characters, so
`Source` converts between the two once per parsed text.
"""
from __future__ import annotations

import bisect
import re
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
        self._byte_starts: list[int] | None = None
        if not text.isascii():
            starts, total = [], 0
            for char in text:
                starts.append(total)
                total += len(char.encode("utf-8", errors="surrogatepass"))
            starts.append(total)
            self._byte_starts = starts

    @property
    def root(self) -> tree_sitter.Node:
        if self.tree is None:
            raise ValueError(f"no tree-sitter grammar for language {self.language_id!r}")
        return self.tree.root_node

    def byte(self, offset: int) -> int:
        return offset if self._byte_starts is None else self._byte_starts[offset]

    def char(self, byte: int) -> int:
        return byte if self._byte_starts is None else bisect.bisect_left(self._byte_starts, byte)

    def start(self, node: tree_sitter.Node) -> int:
        return self.char(node.start_byte)

    def end(self, node: tree_sitter.Node) -> int:
        return self.char(node.end_byte)

    def node_text(self, node: tree_sitter.Node) -> str:
        return self.text[self.start(node):self.end(node)]

    def smallest_node(self, start: int, end: int) -> tree_sitter.Node:
        return self.root.descendant_for_byte_range(self.byte(start), self.byte(end))

    def error_count(self) -> int:
        return error_count(self.tree) if self.tree is not None else 0


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
    """The nodes spelled exactly `word` in [start, end), found by searching the text (fast in
    large files) rather than by walking the tree."""
    pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")
    for match in pattern.finditer(source.text, start, len(source.text) if end is None else end):
        node = source.smallest_node(match.start(), match.end())
        if source.start(node) == match.start() and source.end(node) == match.end():
            yield node


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

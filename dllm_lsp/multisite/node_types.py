"""The node types the multi-site features look for, per grammar, and word search over a Snapshot."""
from __future__ import annotations

from collections.abc import Iterator

import tree_sitter

from dllm_lsp.syntax.snapshot import Snapshot

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


def word_nodes(source: Snapshot, word: str, start: int = 0, end: int | None = None) -> Iterator[tree_sitter.Node]:
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

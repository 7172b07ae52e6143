"""Tree-sitter node helpers that know nothing about offsets: walking, ancestry, error counting."""
from __future__ import annotations

from collections.abc import Iterator

import tree_sitter


def count_errors(node: tree_sitter.Node) -> int:
    """ERROR and MISSING nodes under `node` (itself included).

    A MISSING node of a hidden token (Python's `_newline` in `(x)return y`) is not among any
    node's `children`: only its parent's `has_error` shows it. So a node that reports an error
    none of its visible children explains counts as one error itself; without that, a completion
    that glues two statements together would look as clean as the file it broke. Subtrees
    without errors are skipped."""
    if not node.has_error and not node.is_missing:
        return 0
    total = 0
    stack = [node]
    while stack:
        current = stack.pop()
        if current.is_error or current.is_missing:
            total += 1
        broken = [c for c in current.children if c.has_error or c.is_missing]
        if not broken and current.has_error and not (current.is_error or current.is_missing):
            total += 1   # the error is a hidden child (an invisible MISSING token)
        stack.extend(broken)
    return total


def walk(node: tree_sitter.Node) -> Iterator[tree_sitter.Node]:
    """Every node under `node` (itself included), in document order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


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


def token_at(tree: tree_sitter.Tree, byte: int) -> tree_sitter.Node:
    """The smallest node covering the byte at `byte` (the token it belongs to)."""
    return tree.root_node.descendant_for_byte_range(byte, byte + 1)

"""Tree-sitter questions the planner and post-processing ask: what is at this byte, is it a block,
which piece of the file to reparse when judging a completion."""
from __future__ import annotations

import re

import tree_sitter

from dllm_lsp.syntax.nodes import token_at
from dllm_lsp.syntax.snapshot import Snapshot

from .lines import previous_nonblank_line

# `{` whose parent is one of these opens a block of statements or members (multi-line body);
# any other `{` is a literal (object, initializer, struct expression) filled on one line.
BLOCK_NODE_TYPES = frozenset({
    "block", "statement_block", "compound_statement", "declaration_list", "class_body",
    "interface_body", "enum_body", "enum_class_body", "annotation_type_body", "constructor_body",
    "switch_body", "switch_block", "field_declaration_list", "enum_variant_list", "match_block",
    "enumerator_list", "object_type", "interface_type", "expression_switch_statement",
    "type_switch_statement", "select_statement", "ERROR",
})

# Go blocks of `case` clauses: gofmt writes a `case` at the depth of its `switch` / `select`.
GO_CASE_BLOCK_TYPES = frozenset({"expression_switch_statement", "type_switch_statement", "select_statement"})

# Nodes whose children are statements or members: a child of one of these can be reparsed alone.
CONTAINER_NODE_TYPES = BLOCK_NODE_TYPES | frozenset({
    "module", "program", "source_file", "translation_unit", "chunk", "statement_list",
})

# The parent of a Python `:` that ends a block header.
PYTHON_HEADER_TYPES = frozenset({
    "function_definition", "class_definition", "if_statement", "elif_clause", "else_clause",
    "for_statement", "while_statement", "try_statement", "except_clause", "except_group_clause",
    "finally_clause", "with_statement", "match_statement", "case_clause", "ERROR",
})

# The piece of the file reparsed to judge a completion: the smallest enclosing statement of at
# least REGION_MIN_BYTES (a lone line says little), never more than REGION_LIMIT_BYTES (parsing
# costs about 0.1 ms per kilobyte: post-processing has to stay well under a millisecond).
REGION_MIN_BYTES = 160
REGION_LIMIT_BYTES = 3000


def in_comment_or_string(node: tree_sitter.Node | None, depth: int = 6) -> bool:
    while node is not None and depth > 0:
        kind = node.type
        if "comment" in kind or ("string" in kind and node.is_named) or kind in ("char_literal", "character_literal"):
            return True
        node = node.parent
        depth -= 1
    return False


def string_around(tree: tree_sitter.Tree, byte: int) -> tree_sitter.Node | None:
    """The string literal node strictly enclosing `byte`, if any."""
    node = tree.root_node.descendant_for_byte_range(max(0, byte - 1), byte)
    while node is not None:
        kind = node.type
        if ("string" in kind or kind in ("char_literal", "character_literal")) and node.is_named:
            if node.start_byte < byte < node.end_byte:
                return node
        node = node.parent
    return None


# Between a JSX element's tags (its children: text, `{expressions}`, elements), where a quote is
# text (`<p>Don't {x}</p>`), not the start of a string.
JSX_CHILDREN_TYPES = frozenset({"jsx_element", "jsx_text"})


def prose_around(snapshot: Snapshot, offset: int, floor: int) -> str:
    """What an insertion at string offset `offset` lands in where that is not plain code, as the
    tree has it: "comment" (inside a comment); "string" (inside a string or char literal that
    begins before offset `floor`, where text read from `floor` on does not show it open, or one
    not opened by a lone quote character: `[[`, `\"\"\"`, `r#"`); "jsx" (between a JSX element's
    tags); "" (code, or a string the text from `floor` shows open and closed). "" without a tree."""
    if snapshot.tree is None:
        return ""
    byte = snapshot.byte(offset)
    node = snapshot.tree.root_node.descendant_for_byte_range(max(0, byte - 1), byte + 1)
    if node is not None and node.type in JSX_CHILDREN_TYPES:
        return "jsx"
    for _ in range(2):   # a comment's or string's content node, then the comment or string
        if node is None:
            break
        if node.start_byte < byte < node.end_byte and in_comment_or_string(node, 1):
            if "comment" in node.type:
                return "comment"
            if node.is_named:
                parent = node.parent
                if parent is not None and parent.is_named and in_comment_or_string(parent, 1):
                    node = parent   # a string's content node: the string's own start has its quote
                start = snapshot.char(node.start_byte)
                if start < floor or not _QUOTED.match(snapshot.text, start):
                    return "string"
                return ""
        node = node.parent
    return ""


# Lists in angle brackets: type arguments and parameters (TS / Java / Rust `Map<K, V>`, `Vec::<T>`,
# C++ `std::vector<int>`, `template <class T>`). The same `<` between two values is a comparison,
# which only the tree tells apart.
ANGLE_LIST_TYPES = frozenset({"type_arguments", "type_parameters", "template_argument_list",
                              "template_parameter_list"})


def angle_list_end(snapshot: Snapshot, offset: int) -> int | None:
    """The string offset of the `>` that closes the type argument or parameter list an insertion at
    `offset` lands in (its `<` before `offset`, its `>` at or after it: `new Map<‸>()`); None where
    there is none (`a <‸ b` is a comparison), the `>` is only MISSING, or there is no tree."""
    if snapshot.tree is None:
        return None
    byte = snapshot.byte(offset)
    node = snapshot.tree.root_node.descendant_for_byte_range(byte, byte)
    while node is not None:
        if node.type in ANGLE_LIST_TYPES and node.child_count >= 2:
            first, last = node.child(0), node.child(node.child_count - 1)
            if first.type == "<" and last.type == ">" and not last.is_missing \
                    and first.end_byte <= byte <= last.start_byte:
                return snapshot.char(last.start_byte)
        node = node.parent
    return None


def include_path_end(snapshot: Snapshot, offset: int) -> int | None:
    """The string offset of the `>` that ends the C / C++ header name an insertion at `offset` lands
    in (`#include <‸>`: the grammar's `system_lib_string`, one token from `<` to `>`); None where
    there is none or no tree."""
    if snapshot.tree is None:
        return None
    byte = snapshot.byte(offset)
    node = snapshot.tree.root_node.descendant_for_byte_range(byte, byte)
    if node is None or node.type != "system_lib_string" or not node.start_byte < byte < node.end_byte:
        return None
    end = snapshot.char(node.end_byte) - 1
    return end if snapshot.text[end:end + 1] == ">" else None


def jsx_closing_tag(snapshot: Snapshot, offset: int) -> tuple[int, str] | None:
    """(the string offset, the text) of the closing tag (`</div>`, `</>`) of the JSX element among
    whose children an insertion at `offset` lands (`<div>‸</div>`); None where there is none, the
    tag is missing from the text (broken code), or there is no tree."""
    if snapshot.tree is None:
        return None
    byte = snapshot.byte(offset)
    node = snapshot.tree.root_node.descendant_for_byte_range(byte, byte)
    while node is not None:
        if node.type == "jsx_element":
            opening, closing = node.child_by_field_name("open_tag"), node.child_by_field_name("close_tag")
            if opening is not None and closing is not None and not closing.has_error \
                    and closing.end_byte > closing.start_byte and opening.end_byte <= byte <= closing.start_byte:
                start = snapshot.char(closing.start_byte)
                return start, snapshot.text[start:snapshot.char(closing.end_byte)]
        node = node.parent
    return None


# A string's start that a scan of quote characters reads right: an optional prefix (`f`, `b`,
# `u8`, `L`) and one quote that is not the first of three.
_QUOTED = re.compile(r"""\w*(["'`])(?!\1\1)""")


def _is_statement_level(node: tree_sitter.Node) -> bool:
    parent = node.parent
    return parent is not None and (parent.parent is None or parent.type in CONTAINER_NODE_TYPES)


def _enclosing_statement(snapshot: Snapshot, start: int, end: int) -> tree_sitter.Node | None:
    """The smallest statement-level node around [start, end) of REGION_MIN_BYTES or more, else the
    largest one under REGION_LIMIT_BYTES; None if none is."""
    if snapshot.tree is None:
        return None
    best = None
    node = snapshot.tree.root_node.descendant_for_byte_range(snapshot.byte(start), snapshot.byte(end))
    while node is not None and node.parent is not None:
        if _is_statement_level(node):
            if node.end_byte - node.start_byte > REGION_LIMIT_BYTES:
                break
            best = node
            if node.end_byte - node.start_byte >= REGION_MIN_BYTES:
                break
        node = node.parent
    return best


def check_region(snapshot: Snapshot, start: int, end: int) -> tuple[int, int]:
    """Whole lines [lo, hi) of the snapshot text around the edit [start, end) that parse on their
    own: the smallest enclosing statement (or member) of REGION_MIN_BYTES or more, within
    REGION_LIMIT_BYTES; else the edited lines plus the non-blank line before them (a header)."""
    text = snapshot.text
    best = _enclosing_statement(snapshot, start, end)
    if best is None and start > 0:
        # An edit at the very end of a statement (`else:|` before a blank last line) lies inside
        # no node smaller than the module; the statement that ends there is the region then.
        best = _enclosing_statement(snapshot, start - 1, end)
    if best is not None:
        lo, hi = snapshot.char(best.start_byte), snapshot.char(best.end_byte)
    else:
        lo, hi = start, end
        previous = previous_nonblank_line(text, text.rfind("\n", 0, start) + 1)
        if previous is not None:
            lo = previous[0]
    lo = text.rfind("\n", 0, min(lo, start)) + 1
    newline = text.find("\n", max(hi, end))
    hi = len(text) if newline < 0 else newline
    if hi - lo > 4 * REGION_LIMIT_BYTES:   # a huge line (minified code): a window around the edit
        lo, hi = max(lo, start - REGION_LIMIT_BYTES // 2), min(hi, end + REGION_LIMIT_BYTES // 2)
    return lo, hi


__all__ = ["ANGLE_LIST_TYPES", "BLOCK_NODE_TYPES", "GO_CASE_BLOCK_TYPES", "JSX_CHILDREN_TYPES", "PYTHON_HEADER_TYPES", "angle_list_end", "check_region", "in_comment_or_string",
           "include_path_end", "jsx_closing_tag",
           "prose_around", "string_around", "token_at"]

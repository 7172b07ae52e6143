"""The shape of the hole at a cursor: what kind of text goes there, where it starts, one line or
several, and the indentation a body uses.

Kinds, checked in this order:
  string       inside an empty string literal: `"|"`
  identifier   after a partial word: the span starts at the word's start so it is completed, not
               duplicated (`ret|` -> replace `ret` with `return x`)
  arguments    inside empty brackets that are not a block: `f(|)`, `[|]`, `x = {|}`
  block_body   the body of an empty block: after a header line (`def f():`, `if (x) {`, `then`),
               on a blank line under such a header, or between block braces `{|}`
  line         a blank line that does not start a block: new line(s) at the cursor's indentation
  arrow_tail   the end of a line that ends in `=>` (a Rust match arm, a JavaScript / TypeScript
               arrow function) with nothing under it: a line tail that may be a `{` block written
               whole (an expression answer is finished as a one-line line tail)
  line_tail    anything else: the rest of the current line, before what the line already has after
               the cursor (closers stay in the suffix)
Tree-sitter settles what text alone cannot (is this `:` a block header, is this `{` a block or an
object literal, is this quote inside a string, is the header inside a comment); without a tree
(unknown languages, huge files) the text rules decide alone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from dllm_lsp.syntax.languages import LanguageFacts
from dllm_lsp.syntax.snapshot import Snapshot

from .lines import detect_indent_unit, indent_width, leading_ws, line_bounds, next_nonblank_line, previous_nonblank_line
from .syntax import BLOCK_NODE_TYPES, GO_CASE_BLOCK_TYPES, PYTHON_HEADER_TYPES, in_comment_or_string, string_around, token_at

# Spans that may run over several lines; of them, the ones whose text starts a line of its own (or
# the next: a body under its header) rather than going on from the cursor's line.
MULTI_LINE_KINDS = frozenset({"block_body", "line", "arrow_tail"})
NEW_LINE_KINDS = frozenset({"block_body", "line"})
# Languages whose `=>` at a line's end asks for an expression or a `{` block (match arms, arrow functions)
_ARROW_LANGUAGES = frozenset({"rust", "javascript", "typescript", "tsx"})

_PAIRS = {"(": ")", "[": "]", "{": "}"}
_QUOTES = "\"'`"
_MAX_WORD = 200   # longer "words" (base64, minified blobs) are not identifiers being typed
_WORD_BEFORE = re.compile(r"(?:[^\W\d]|\$)[\w$]*$")
_LUA_FUNCTION_HEADER = re.compile(r"\bfunction\b[^()]*\([^()]*\)$")
_FIRST_WORD = re.compile(r"\s*(?:async\s+)?(\w+)")
_PYTHON_HEADER_KEYWORDS = frozenset({"def", "class", "if", "elif", "else", "for", "while", "try", "except",
                                     "finally", "with", "match", "case"})
_CASE_LABEL = re.compile(r"^(case\b.*|default\s*):$")


@dataclass(frozen=True)
class Shape:
    kind: str
    replace_start: int
    single_line: bool
    indent: str                  # indentation of the span's lines
    indent_unit: str
    closer_indent: str | None = None   # `{|}`: a multi-line body ends with a newline and this indent
    after_cursor: int = 0        # `{ | }`: blanks after the cursor the span replaces (SpanPlan.after_cursor)


def cursor_shape(snapshot: Snapshot, offset: int, facts: LanguageFacts) -> Shape:
    text = snapshot.text
    line_start, line_end = line_bounds(text, offset)
    before, after = text[line_start:offset], text[offset:line_end]
    line_indent = leading_ws(before if not before.strip() else text[line_start:line_end])
    unit = detect_indent_unit(text, offset, facts.indent_unit)

    def shape(kind: str, start: int = offset, indent: str = line_indent, closer: str | None = None,
              after_cursor: int = 0) -> Shape:
        return Shape(kind, start, kind not in MULTI_LINE_KINDS, indent, unit, closer, after_cursor)

    if _in_empty_string(snapshot, offset, before, after):
        return shape("string")

    word = _partial_word(before, facts)
    if word:
        return shape("identifier", start=offset - len(word))

    head, tail = before.rstrip(" \t"), after.lstrip(" \t")
    if head and head[-1] in _PAIRS and tail.startswith(_PAIRS[head[-1]]) \
            and not _inside_comment_or_string(snapshot, line_start + len(head) - 1):
        if head[-1] == "{" and _brace_opens_block(snapshot, line_start + len(head) - 1):
            # `{ | }`: the blanks after the cursor stay in front of the `}`, which the body pushes
            # to a line of its own, so they count towards its indentation. Where the line is indented
            # otherwise (`{ | }` on a line at column 0: every top-level `function f() { }`),
            # they cannot: the `}` landed right of its line's indentation, so the span replaces them.
            blanks = after[:len(after) - len(tail)]
            step = _body_step(snapshot, line_start + len(head) - 1, facts, unit)
            if blanks and line_indent.endswith(blanks):
                return shape("block_body", indent=line_indent + step, closer=line_indent[:len(line_indent) - len(blanks)])
            return shape("block_body", indent=line_indent + step, closer=line_indent, after_cursor=len(blanks))
        return shape("arguments")

    if tail:
        return shape("line_tail")

    if head:   # cursor at the end of a non-blank line
        if _opens_block(snapshot, line_start, head, facts) and _block_is_empty(text, line_end, line_indent):
            return shape("block_body", indent=line_indent + _body_step(snapshot, line_start + len(head) - 1, facts, unit))
        if facts.name in _ARROW_LANGUAGES and head.endswith("=>") \
                and not _inside_comment_or_string(snapshot, line_start + len(head) - 1) \
                and _block_is_empty(text, line_end, line_indent):
            # `1 => ‸`, `(x) => ‸`: the answer is an expression or a block (`{` + lines + `}`).
            # Planned as one line, a block was cut to its `{`; several lines are allowed here and
            # post-processing keeps them only for a block (postprocess._finish_arrow_tail).
            return shape("arrow_tail")
        return shape("line_tail")

    # A blank line: the body of the header above it, or a new line of its own.
    previous = previous_nonblank_line(text, line_start)
    if previous is not None:
        header_start, header = previous
        header_indent = leading_ws(header)
        if _opens_block(snapshot, header_start, header.rstrip(" \t"), facts) \
                and _block_is_empty(text, line_end, header_indent):
            body_indent = header_indent + _body_step(snapshot, header_start + len(header.rstrip(" \t")) - 1, facts, unit)
            if indent_width(before) > indent_width(body_indent):   # the editor indented deeper: keep it
                body_indent = before
            return shape("block_body", indent=body_indent)
    return shape("line", indent=before)


def _body_step(snapshot: Snapshot, last: int, facts: LanguageFacts, unit: str) -> str:
    """What a block's body adds to its header's indentation, the header's last character at offset
    `last`: one step of the file's (`unit`), or nothing for the `{` of a Go `switch` or `select`,
    whose `case` lines gofmt puts at the header's depth (one step deeper, every model-written
    `case` was pushed a step past gofmt, and so was a `case` the user had typed there)."""
    if facts.name != "go" or snapshot.tree is None or snapshot.text[last:last + 1] != "{":
        return unit
    token = token_at(snapshot.tree, snapshot.byte(last))
    return "" if token.type == "{" and token.parent is not None and token.parent.type in GO_CASE_BLOCK_TYPES \
        else unit


def _in_empty_string(snapshot: Snapshot, offset: int, before: str, after: str) -> bool:
    if not before or before[-1] not in _QUOTES or not after.startswith(before[-1]):
        return False
    if snapshot.tree is None:   # line rule: the quote before the cursor opens a string
        return before.count(before[-1]) % 2 == 1
    return string_around(snapshot.tree, snapshot.byte(offset)) is not None


def _partial_word(before: str, facts: LanguageFacts) -> str:
    before = before[-_MAX_WORD - 1:]   # bounded: a megabyte-long minified line must not cost more
    match = _WORD_BEFORE.search(before)
    if match is None or len(match.group()) > _MAX_WORD:
        return ""
    if match.start() > 0 and (before[match.start() - 1].isalnum() or before[match.start() - 1] == "_"):
        return ""   # the tail of a number such as 0x1f or 1e5
    word = match.group()
    if word in facts.header_keywords:
        return ""   # `if x then|`: the cursor ends a block header, the body comes next
    return word


def _inside_comment_or_string(snapshot: Snapshot, offset: int) -> bool:
    if snapshot.tree is None:
        return False
    return in_comment_or_string(token_at(snapshot.tree, snapshot.byte(offset)))


def _brace_opens_block(snapshot: Snapshot, brace: int) -> bool:
    if snapshot.tree is None:
        return False   # line rules: `{|}` is filled on one line
    token = token_at(snapshot.tree, snapshot.byte(brace))
    parent = token.parent if token.type == "{" else token
    if parent is not None and parent.type == "token_tree" and parent.parent is not None \
            and parent.parent.type == "macro_rule" and parent.parent.child_by_field_name("right") == parent:
        # The body of a Rust `macro_rules!` rule (`($x:expr) => {‸};`): a token tree to the
        # grammar, written as a block of code (it was filled on one line and every multi-line
        # body refused). A macro call's `m!{‸}` stays one line.
        return True
    return parent is not None and parent.type in BLOCK_NODE_TYPES


def _opens_block(snapshot: Snapshot, line_start: int, head: str, facts: LanguageFacts) -> bool:
    """Does the line `head` (no trailing blanks) end by opening a block or a bracketed list?"""
    if not head.strip():
        return False
    last = line_start + len(head) - 1
    if _inside_comment_or_string(snapshot, last):
        return False
    if head[-1] in _PAIRS:
        return True
    if facts.header_keywords:   # Lua: `then`, `do`, `else`, `repeat`, `function f(x)`
        words = head.split()
        return words[-1] in facts.header_keywords or bool(_LUA_FUNCTION_HEADER.search(head.strip()))
    if head[-1] != ":":
        return False
    if facts.name == "python":
        first = _FIRST_WORD.match(head)
        keyword_header = first is not None and first.group(1) in _PYTHON_HEADER_KEYWORDS
        if snapshot.tree is None:
            return keyword_header
        token = token_at(snapshot.tree, snapshot.byte(last))
        parent = token.parent.type if token.parent is not None else ""
        # In broken code the `:` sits in an ERROR node: trust it only on a line that starts like a header
        return parent in PYTHON_HEADER_TYPES and (parent != "ERROR" or keyword_header)
    if facts.name == "text":
        return True
    return bool(_CASE_LABEL.match(head.strip()))   # `case 1:` / `default:` in switch-like blocks


def _block_is_empty(text: str, line_end: int, header_indent: str) -> bool:
    """Nothing indented deeper than the header follows (the next non-blank line closes the block,
    starts the next statement, or there is none)."""
    following = next_nonblank_line(text, line_end)
    if following is None:
        return True
    return indent_width(leading_ws(following[1])) <= indent_width(header_indent)

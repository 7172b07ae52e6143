"""From the model's raw span text to the text the editor inserts (or None: show nothing).

finish() runs, in order:
  1. take the blanks the planner left to the model (token healing) back out of its text (unheal);
     special tokens never reach here (the engine cuts a slot at its end markers and leaves the
     others out, by token id: `"<pad>"` in the text is the user's code);
  2. mid-identifier spans must start with the typed word (the editor replaces it);
  3. one-line spans stop at the first newline; multi-line bodies are re-indented to the header's
     indentation plus one step of the file's own (body_indent; Python: a line dedented out of the
     body ends it); after a `=>` at a line's end (`arrow_tail`), a `{` block is kept whole, any
     other text is a one-line span;
  4. overlap with the suffix is trimmed: closers the line already has (`)`, `"`, `);`) and trailing
     lines the suffix already has (`}`), but never a bracket the completion itself opened, nor
     (outside Python) a closer line that closes a bracket the file leaves open; right before the
     `>` of a type argument list (`new Map<‸>();`, as the tree has it) or a JSX closing tag
     (`<div>‸</div>`), the completion's own copy of it and what the line already has after it;
     inside a C / C++ header name (`#include <‸>`), the completion from its `>` on;
  5. trailing whitespace and empty results are dropped; mid-line, a one-line completion may not
     leave a bracket or string open that the rest of the line does not close (not read inside a
     comment or a string begun above, and quotes are text between JSX tags), and (outside
     Python) at a line's end, or over a multi-line completion's lines, its closers must close
     what the file leaves open and a one-line completion's `'` not open a char literal it leaves
     open;
  6. the file's tree-sitter parse must not get worse (more ERROR/MISSING nodes) than without the
     completion; a worse one is cut back line by line, or dropped. Only the enclosing statement is
     reparsed (see planner.syntax.check_region), which keeps this step well under a millisecond;
     in Python, from the `if` / `try` / `for` / `while` on that an `elif` / `else` / `except` /
     `finally` of the completion continues. A broken file that parses whole with the completion
     (it closes what the user left open) is not made worse, whatever its region says;
  7. Python only: the interpreter's own parser (`ast.parse`) reads the whole edited file, and its
     first syntax error must not come earlier than the file's own first error (none, if the file
     parsed). This catches what a region check cannot see (a completion that closes a docstring
     breaks everything after it) and what tree-sitter's grammar accepts but CPython does not
     (`while lo <1: hi:`). Files over PYTHON_CHECK_MAX_CHARS skip it (the parse grows with size).
     Where the edited file parses, the completion may not call a name that nothing defines (not
     a builtin, not bound by the completion, not written anywhere in the file: `assert_equal(x)`).
"""
from __future__ import annotations

import ast
import builtins
import functools
import re
import warnings
from dataclasses import dataclass

from dllm_lsp.code_scan import (LINE_ESCAPES, Delimited, Lexicon, Scanner, digit_separator,
                                rust_char_or_lifetime)
from dllm_lsp.syntax.languages import facts_for
from dllm_lsp.planner.lines import (block_steps, indent_width, leading_ws, line_break_near, line_bounds,
                                    previous_nonblank_line, render_indent, usual_step)
from dllm_lsp.planner.syntax import (REGION_LIMIT_BYTES, angle_list_end, check_region, in_comment_or_string,
                                     include_path_end, jsx_closing_tag, prose_around)
from dllm_lsp.syntax.snapshot import Snapshot, end_point, parse_errors, point
from dllm_lsp.planner.shapes import NEW_LINE_KINDS
from dllm_lsp.planner.types import SpanPlan

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {v: k for k, v in _OPENERS.items()}
_QUOTES = "\"'`"
_CLOSING_PUNCTUATION = frozenset(")]};,\"'` \t")
_SUFFIX_LINES_LOOKED_AT = 2000   # characters of suffix compared with a multi-line completion's tail
# Characters of the line on each side of a one-line completion read for the brackets it leaves
# open: a minified megabyte line is read in Python twice per completion otherwise.
_LINE_LOOKED_AT = 2000


def finish(plan: SpanPlan, completion: str, provided: frozenset[str] = frozenset()) -> str | None:
    """The text to insert over [plan.replace_start, plan.replace_end) of the text the plan was made
    on (plan.snapshot), or None. A newer version of the document is never consulted: the plan's
    offsets, tree and parse check all belong to its own snapshot. `provided`: names an edit shown
    with the completion brings into the file (a companion import), which it may call."""
    if not isinstance(completion, str):
        raise TypeError(f"completion must be a string, got {type(completion).__name__}")
    doc_text = plan.snapshot.text
    text = unheal(plan, completion.replace("\r\n", "\n"))
    if plan.typed_prefix and not text.startswith(plan.typed_prefix):
        return None
    if plan.single_line:
        return _finish_line(plan, doc_text, text, provided)
    if plan.kind == "arrow_tail":
        return _finish_arrow_tail(plan, doc_text, text, provided)
    return _finish_block(plan, doc_text, text, provided)


def unheal(plan: SpanPlan, text: str) -> str:
    """The model's text for a plan whose prefix left out the blanks typed before the span
    (`plan.healed`, planner/spans.healed_blanks), rewritten as the text after those blanks, which
    the rest of post-processing reads it as. The typed blanks stand: the model's own blanks before
    its first word are dropped on a one-line span, and on a blank line its lines are re-based so
    that its first line sits at the typed indentation (the user or the editor chose that block;
    a model that wrote a shallower first line has the rest of its lines moved with it)."""
    healed = plan.healed
    if not healed or not text:
        return text
    first, newline, rest = text.partition("\n")
    body = first.lstrip(" \t")
    if plan.kind not in NEW_LINE_KINDS or not body:   # the span goes on from the cursor's line
        return body + newline + rest
    wrote, typed = indent_width(leading_ws(first)), indent_width(healed)
    if wrote >= typed:
        deeper = first[len(healed):] if first.startswith(healed) else render_indent(wrote - typed, plan.indent_unit) + body
        return deeper + newline + rest
    shift = typed - wrote
    lines = [render_indent(indent_width(leading_ws(line)) + shift, plan.indent_unit) + line.lstrip(" \t")
             if line.strip() else line for line in rest.split("\n")] if newline else []
    return "\n".join([body, *lines])


# --- one-line spans --------------------------------------------------------------------------------

def _finish_line(plan: SpanPlan, doc_text: str, text: str, provided: frozenset[str] = frozenset()) -> str | None:
    newline = text.find("\n")
    if newline >= 0:
        text = text[:newline]
    name = facts_for(plan.snapshot.language_id).name
    if ">" in plan.line_rest:
        closed = _closer_overlap(plan, doc_text, text, name)
        if closed is None:
            return None
        text = closed
    text = trim_line_overlap(text.rstrip(), plan.line_rest, name)
    if not text.strip() or text == plan.typed_prefix or not text.startswith(plan.typed_prefix):
        return None
    rest = plan.line_rest
    if rest[:1].isidentifier() or rest[:1].isdigit():
        # The cursor is before a word (`os.getc|wd()`, `x = |value`): a completion ending in a
        # word character would be glued onto it (`os.getclass_namewd()`), and inside a word
        # nothing that leaves the word's tail behind it reads as code (`len(value,ues)`).
        before = doc_text[plan.replace_end - 1:plan.replace_end]
        if _word_char(text[-1]) or (before and _word_char(before)):
            return None
    if rest.strip():
        # Mid-line, a one-line completion must not open a bracket or a string that neither it nor
        # the rest of its line closes (`"range": ",`, `size: {,`): on a line the user is still
        # typing, the file already has an error there and the parse count would not see it.
        line_start = line_bounds(doc_text, plan.replace_start)[0]
        head_start = max(line_start, plan.replace_start - _LINE_LOOKED_AT)
        prose = prose_around(plan.snapshot, plan.replace_start, head_start)
        # Inside a comment, or a string opened on a line above (a docstring's second line), the
        # line's text is no code to read brackets in: a `'` there (`user's`) was read as a quote
        # left open, and every such completion was refused. What breaks out of the comment or
        # string (`*/`, `"""`) the parse check sees.
        if prose not in ("comment", "string"):
            head = doc_text[head_start:plan.replace_start]
            rest = rest[:_LINE_LOOKED_AT]
            strings = prose != "jsx"   # quotes between JSX tags are text (`<p>Don't ‸</p>`)
            before = _brackets(head + rest, name, strings)
            after = _brackets(head + text + rest, name, strings)
            # A string the completion opens and leaves open counts on its own: it swallows the
            # rest's closers, so the count alone stayed the same (`if self.‸}` + `get_name == "`).
            if after.unbalanced > before.unbalanced or (after.quote is not None and before.quote is None):
                return None
    elif _BracketRule(plan, doc_text).breaks(text):
        return None
    return text if _ParseCheck(plan, provided)(text) else None


def _closer_overlap(plan: SpanPlan, doc_text: str, text: str, name: str) -> str | None:
    """`text` right before a closer the rest of the line has and the tree says the cursor is
    inside of, with what it writes from its own copy of that closer on cut where the line already
    has it, or None where it writes the closer and goes on otherwise (the line's own would close
    nothing). The closers: the `>` of a type argument or parameter list (`new Map<‸>();`:
    `string, number>()` -> `string, number`; `<` / `>` are no brackets to the other rules, they
    are comparisons as often, so `Map<string, number>()>();` was shown), the `>` of a C / C++
    header name (`#include <‸>`: `stdio.h>` -> `stdio.h`; what follows a header name on its line
    is a comment at most, so the completion is cut there whatever it writes after it), and a JSX
    element's closing tag (`<div>‸</div>`: `hello</div>` -> `hello`; refused, as doubling it
    breaks the file, where it was shown as text with a `>` in it, `<div>hello</div>`)."""
    line_end = plan.replace_end + len(plan.line_rest)
    snapshot, cursor = plan.snapshot, plan.replace_end
    header = include_path_end(snapshot, cursor)
    if header is not None:
        close, at = header, text.find(">")
        at = None if at < 0 else at
    elif (tag := jsx_closing_tag(snapshot, cursor)) is not None:
        close, at = tag[0], _closing_tag(text, tag[1])
    else:
        close = angle_list_end(snapshot, cursor)
        at = None if close is None else _closing_angle(text, name)
    if close is None or close > line_end or doc_text[cursor:close].strip():
        # Only where the closer follows the cursor (blanks aside): a broken comparison may read as
        # a list to the grammar (TypeScript's `a <‸ && b > 0` is `a<&&b>`, an instantiation
        # expression) and the text between is the user's.
        return text
    if at is None:
        return text
    if header is not None or doc_text[close:line_end].startswith(text[at:].rstrip()):
        return text[:at].rstrip()
    return None


def _closing_tag(text: str, tag: str) -> int | None:
    """The index in `text` of the first JSX closing tag `tag` (`</div>`, `</>`) that closes no
    element `text` opens itself with the same name (`<div>a</div></div>`: the second one); None
    if none. A tag's attributes are not read for a `>` (`<div title="a>b">`: rare in a line)."""
    name = tag[2:-1].strip()
    opening = re.compile(r"<" + re.escape(name) + (r"(?=[\s/>])" if name else r"(?=>)"))
    closing = re.compile(r"<\s*/\s*" + re.escape(name) + r"\s*>")
    depth, at = 0, 0
    while True:
        closed = closing.search(text, at)
        if closed is None:
            return None
        for opened in opening.finditer(text, at, closed.start()):
            end = text.find(">", opened.end(), closed.start())
            if end < 0 or text[end - 1] != "/":   # `<div/>` opens nothing
                depth += 1
        if not depth:
            return closed.start()
        depth -= 1
        at = closed.end()


def _closing_angle(text: str, name: str) -> int | None:
    """The index of the first `>` in `text` (one line of code in language `name`) that closes no
    `<` of its own, outside its own brackets and strings (an arrow's `=>` / `->` is no closer);
    None if none."""
    depth = nested = 0
    for at, ch in _scan(text, name, angles=True)[0]:
        if ch in _OPENERS:
            nested += 1
        elif ch in _CLOSERS:
            nested = max(0, nested - 1)
        elif nested:
            continue          # a `<` / `>` inside its own brackets (a call's comparison)
        elif ch == "<":
            depth += 1
        elif text[at - 1:at] not in ("=", "-"):
            if not depth:
                return at
            depth -= 1
    return None


def _word_char(ch: str) -> bool:
    return ch.isidentifier() or ch.isdigit()


@dataclass(frozen=True)
class _Brackets:
    """What a piece of code leaves open, read left to right: `open`, the openers it does not close
    (innermost last); `stray`, its closers that close nothing; `quote`, the quote of a string open
    at its end. Brackets inside strings do not count, and a string ends with its line (a `'` in
    a comment, `don't`, would otherwise hide every bracket after it)."""

    open: tuple[str, ...]
    stray: int
    quote: str | None

    @property
    def unbalanced(self) -> int:
        return len(self.open) + self.stray + (self.quote is not None)


def _brackets(text: str, name: str = "", strings: bool = True) -> _Brackets:
    """What `text`, code in language `name` (canonical grammar name; "" for any), leaves open,
    read by _scan (comments read as code). `strings` False: no quote opens a string (JSX text,
    where `'` is an apostrophe)."""
    stack: list[str] = []
    stray = 0
    marks, quote, _ = _scan(text, name, strings=strings)
    for _, ch in marks:
        if not _pair(stack, ch):
            stray += 1
    return _Brackets(tuple(stack), stray, quote)


def trim_line_overlap(text: str, rest: str, name: str = "") -> str:
    """Drop the end of `text` that the rest of the line already has (`foo(a)` before `)` -> `foo(a`
    only if that `)` is not the completion's own). `name`: the file's language (canonical grammar
    name), which says what a `'` is (_APOSTROPHE_RULES)."""
    rest = rest.rstrip()
    if not rest or not text:
        return text
    for size in range(min(len(text), len(rest)), 0, -1):
        tail = rest[:size]
        if not text.endswith(tail) or not tail.strip():
            continue
        if size != len(rest) and not set(tail) <= _CLOSING_PUNCTUATION:
            continue   # a partial match of real code is a coincidence, not an overlap
        if _removable(text[:-size], tail, name, strings=True):
            return text[:-size].rstrip()
    # The line ends in closers only (`)`, `);`): the completion may have written them and gone on
    # (`x):` before `)`), so cut at the first place it writes them that closes nothing of its own.
    # A cut inside a bracket the completion opened would take its own `,` for the line's
    # (`max(width, height)` before `,` -> `max(width`).
    closers = rest.lstrip()
    if set(closers) <= _CLOSING_PUNCTUATION:
        at = text.find(closers)
        while at >= 0:
            kept = _brackets(text[:at], name)
            if not kept.open and kept.quote is None:   # then no closer of `closers` is its own
                return text[:at].rstrip()
            at = text.find(closers, at + 1)
    return text


def _removable(kept: str, removed: str, name: str = "", strings: bool = False) -> bool:
    """True when no closer in `removed` closes a bracket `kept` (code in language `name`) leaves
    open (and, with `strings`, no quote in it closes a string `kept` leaves open): the removed text
    then only duplicates closers the document already has."""
    left = _brackets(kept, name)
    own = 0   # openers inside `removed`, which its own closers may close
    for ch in removed:
        if ch in _OPENERS:
            own += 1
        elif ch in _CLOSERS:
            if own:
                own -= 1
            elif left.open:
                return False
    return not (strings and left.quote is not None and left.quote in removed)


# --- one-line spans at a line's end (languages other than Python) ---------------------------------
#
# At the end of a line the user is still typing, the file already has an error there, and the
# parse check only refuses a completion that adds one: a completion that trades the line's error
# for another (`foo(a, b))`, `x := y}`, `c := 'a`) was shown (a probe typing Go, Lua, Java and
# JavaScript with the shipped model). What the completion writes is judged on its own instead:
# each closer must close a bracket the file leaves open, and a `'` must not open a character
# literal it leaves open. Python has the interpreter's parser for that (the _ParseCheck).

_CHAR_QUOTE_LANGUAGES = frozenset({"c", "cpp", "go", "java", "rust"})   # `'` opens a char literal
# Tree nodes read for the brackets open around the cursor's line; a file broken wider than this
# (an ERROR node holding most of it) is not judged: reading it costs more than the rule is worth.
_TREE_NODES_LOOKED_AT = 4000
_TREE_BYTES_LOOKED_AT = 4000


class _BracketRule:
    """Does a completion outside Python close a bracket that nothing leaves open, or (one line at
    its line's end) leave open a character literal it opens? What is open is read from the file's
    tree around the cursor's line and from that line's text up to the plan's start, then on over
    the completion's own lines. `breaks` answers True, False, or None where it cannot tell: Python
    or no tree; the line starts or the cursor ends inside a comment or string; a C preprocessor
    line; a line longer than _LINE_LOOKED_AT before the cursor. A multi-line completion is read up
    to the first line that leaves a string, char literal or block comment open (its next lines are
    not code to read brackets in)."""

    def __init__(self, plan: SpanPlan, doc_text: str) -> None:
        self.plan, self.doc_text = plan, doc_text
        self.name = facts_for(plan.snapshot.language_id).name
        self.opened: tuple[str, list[str]] | None | object = _UNSET

    def _open_at_start(self) -> tuple[str, list[str]] | None:
        """(the line up to the plan's start, the openers open there that the file's closers after
        the cursor leave open), once per plan; None where it cannot tell."""
        if self.opened is _UNSET:
            self.opened = None
            plan, name = self.plan, self.name
            line_start = line_bounds(self.doc_text, plan.replace_start)[0]
            head = self.doc_text[line_start:plan.replace_start]
            if plan.snapshot.tree is None or len(head) > _LINE_LOOKED_AT:
                return None
            if name in ("c", "cpp") and head.lstrip().startswith("#"):
                return None   # a macro's body may hold any bracket (`#define END_NS }`)
            around = _brackets_around_line(plan.snapshot, line_start, plan.replace_end)
            if around is None:
                return None
            open_before, closed_after = around
            stack = list(open_before)
            for _, ch in _line_code(head, name)[0]:
                _pair(stack, ch)
            self.opened = head, _left_open(stack, closed_after)
        return self.opened

    def breaks(self, text: str) -> bool | None:
        name = self.name
        if name in ("python", "text"):
            return None
        if not any(ch in _CLOSERS or ch == "'" for ch in text):
            return False   # (most completions: the tree is not read)
        opened = self._open_at_start()
        if opened is None:
            return None
        head, open_at_start = opened
        stack = list(open_at_start)
        lines = (head + text).split("\n")
        marks, quote, quote_at = _line_code(lines[0], name)
        for at, ch in marks:
            if at >= len(head) and not _pair(stack, ch):
                return True   # a closer of the completion's that closes nothing left open
        if len(lines) == 1:
            return quote == "'" and quote_at >= len(head) and name in _CHAR_QUOTE_LANGUAGES
        for line in lines[1:]:
            if quote is not None:
                return False   # a string or comment goes on over lines: what follows is not read
            if name in ("c", "cpp") and line.lstrip().startswith("#"):
                continue
            marks, quote, _ = _line_code(line, name)
            if not all(_pair(stack, ch) for _, ch in marks):
                return True
        return False


def _pair(stack: list[str], ch: str) -> bool:
    """Read bracket `ch` onto the openers `stack`: False for a closer that does not close its top."""
    if ch in _OPENERS:
        stack.append(ch)
    elif stack and stack[-1] == _CLOSERS[ch]:
        stack.pop()
    else:
        return False
    return True


def _left_open(stack: list[str], closers: list[str]) -> list[str]:
    """The openers of `stack` that `closers` (read after them, in order) leave open: each closer
    closes the innermost opener of its kind (the ones it skips are left open: `foo(a,` over a
    function's `}`)."""
    stack = list(stack)
    for ch in closers:
        opener = _CLOSERS[ch]
        for at in range(len(stack) - 1, -1, -1):
            if stack[at] == opener:
                del stack[at]
                break
    return stack


def _brackets_around_line(snapshot: Snapshot, line_start: int, cursor: int) -> tuple[list[str], list[str]] | None:
    """The file's brackets outside the line up to the cursor, as its tree has their tokens: the
    openers left open before `line_start` (outermost first), and the closers after `cursor` that
    close nothing after it (in order), which close what is open before. None where the line starts
    or the cursor ends inside a token (a comment, a string, a macro continued over lines) or the
    tree is broken wider than _TREE_NODES_LOOKED_AT nodes.

    A subtree without errors has its brackets paired (its grammar pairs them) and is not read; an
    ERROR node holds its tokens. Of a node's children only those within _TREE_BYTES_LOOKED_AT of
    the line are read, and its first and last (a block's `{` and `}`, however long the block): a
    file's hundreds of functions cost a millisecond or more to walk, and a bracket left open
    further above in a node without its own (a wide ERROR) is left out."""
    lo, hi = snapshot.byte(line_start), snapshot.byte(cursor)
    window_lo, window_hi = max(0, lo - _TREE_BYTES_LOOKED_AT), hi + _TREE_BYTES_LOOKED_AT
    before: list[str] = []
    after: list[str] = []     # openers after the cursor, waiting for their own closers
    closing: list[str] = []
    pending = [_children_near(snapshot.tree.root_node, window_lo, window_hi)]
    budget = _TREE_NODES_LOOKED_AT
    while pending:
        node = next(pending[-1], None)
        if node is None:
            pending.pop()
            continue
        budget -= 1
        if budget < 0:
            return None
        start, end = node.start_byte, node.end_byte
        if lo <= start and end <= hi:
            continue          # the line up to the cursor: read as text (the user may be typing a string)
        if end <= lo or start >= hi:
            if node.child_count:
                if node.has_error:
                    pending.append(_children_near(node, window_lo, window_hi))
            elif not node.is_named and not node.is_missing:
                for ch in node.type:
                    if ch in _OPENERS or ch in _CLOSERS:
                        if end <= lo:
                            _pair(before, ch)
                        elif not _pair(after, ch):
                            closing.append(ch)
            continue
        if node.child_count == 0:
            if node.is_named:
                return None   # a comment, string or macro body over the line's start or end
            continue          # a line break token (Go's, a CRLF's)
        if in_comment_or_string(node, 1):
            return None
        pending.append(_children_near(node, window_lo, window_hi))
    return before, closing


def _children_near(node, lo: int, hi: int):
    """`node`'s children that overlap [lo, hi), with its first and last child, in order."""
    count = node.child_count
    if not count:
        return
    first, last = node.child(0), node.child(count - 1)
    if lo <= first.start_byte:
        child = first
    elif lo < last.end_byte:
        child = node.first_child_for_byte(lo)
    else:
        # (py-tree-sitter 0.26 hands back an unusable node, and a read of it crashes the process,
        # where no child ends after `lo`)
        child = None
    if child is None or child.start_byte >= hi:
        yield first
        if last.id != first.id:
            yield last
        return
    if child.id != first.id:
        yield first
    while child is not None and child.start_byte < hi:
        yield child
        if child.id == last.id:
            return
        child = child.next_sibling
    yield last


def _line_code(line: str, name: str) -> tuple[list[tuple[int, str]], str | None, int]:
    """The brackets of one line of code in language `name` (canonical grammar name) with their
    indices, outside its strings, character literals and comments, and the quote of a string,
    character literal or block comment open at its end with its index (_scan, comments read)."""
    return _scan(line, name, comments=True)


# The one-line rules' reading (code_scan.Scanner with the lexicon _scanner builds). A string ends
# with its line, a backslash escaping the next character of it; where a `'` opens no string, a
# language's rule says (C / C++ digit separators, Rust char literals and lifetimes).
_LINE_STRINGS = tuple(Delimited("string", quote, quote, False, LINE_ESCAPES) for quote in _QUOTES)
_APOSTROPHE_RULES = {"c": digit_separator, "cpp": digit_separator, "rust": rust_char_or_lifetime}
_BLOCK_COMMENT = Delimited("comment", "/*", "*/", True)
# Lua's long brackets (`--[==[`, `[==[`) go on past their line; a long string has no escapes and
# no brackets inside.
_LUA_LONG_COMMENT = Delimited("comment", "--[[", "]]", True, levels=True)
_LUA_LONG_STRING = Delimited("string", "[[", "]]", True, levels=True)


def _scan(text: str, name: str = "", *, strings: bool = True, comments: bool = False,
          angles: bool = False) -> tuple[list[tuple[int, str]], str | None, int]:
    """The one reading of quotes and brackets the rules here share: the brackets of `text` (code in
    language `name`, canonical grammar name; "" for any) with their indices, outside its strings
    and character literals, and the quote of a string open at its end with its index (None, -1:
    none). In a string a backslash escapes the next character, and a string ends with its line (a
    `'` in a comment, `don't`, would otherwise hide every bracket after it); a `'` that the
    language's rule (code_scan.digit_separator, rust_char_or_lifetime) reads as code opens no
    string (a Rust lifetime, a C++ digit separator `1'000`, a Rust char literal's bracket `')'`).
    What the rules read differently is asked for:
    `strings` False: no quote opens a string (JSX text, where `'` is an apostrophe);
    `comments`: a line comment ends the reading and a block comment is skipped (one left open at
    the end is the quote, `/*` or Lua's `--[[`), and so is a Lua long string (`[[`, `[==[`: no
    escapes, no brackets inside); without it (the one-line rules, which read a completion's own
    text and the line around it) comments are read as code, as they always were there;
    `angles`: `<` and `>` are marks too (a type argument list's, _closing_angle)."""
    marks: list[tuple[int, str]] = []
    for token in _scanner(name, strings, comments, angles).tokens(text):
        if token.kind == "bracket":
            marks.append((token.start, token.opener))
        elif not token.closed and token.end == len(text):
            return marks, token.opener, token.start    # open at the end (a one-line string that its line ended is not)
        elif token.kind == "line" or token.opener == _LUA_LONG_COMMENT.opener:
            # A Lua long comment ends the reading as the `--` it begins with does, closed on the
            # line or not: these rules read a line at a time, and what follows one on its line is
            # left unread, as it always was.
            break
    return marks, None, -1


@functools.cache
def _scanner(name: str, strings: bool, comments: bool, angles: bool) -> Scanner:
    """The scanner _scan reads with (one per language and reading, compiled on first use)."""
    lua = comments and name == "lua"
    line_comment = facts_for(name).line_comment if comments else None
    return Scanner(Lexicon(
        block_comments=(_LUA_LONG_COMMENT,) if lua else (_BLOCK_COMMENT,) if comments else (),
        line_comments=(line_comment,) if line_comment else (),
        apostrophe=_APOSTROPHE_RULES.get(name) if strings else None,
        strings=(_LINE_STRINGS if strings else ()) + ((_LUA_LONG_STRING,) if lua else ()),
        brackets="()[]{}<>" if angles else "()[]{}"))


# --- after a `=>` at a line's end ------------------------------------------------------------------

def _finish_arrow_tail(plan: SpanPlan, doc_text: str, text: str, provided: frozenset[str] = frozenset()) -> str | None:
    """`1 => ‸`, `(x) => ‸` (the planner's `arrow_tail`): a `{` block the completion opens on its
    first line is shown whole, up to the line that closes it, its lines re-indented under the
    cursor's line (planned as one line, only the `{` was shown). Any other completion, and a
    block that never closes or that the bracket rule or the parse check refuses, is finished as
    a one-line line tail (its first line), as before."""
    lines = _arrow_block(text.split("\n"), facts_for(plan.snapshot.language_id).name)
    if lines is not None:
        line_start = line_bounds(doc_text, plan.replace_start)[0]
        block = _arrow_block_lines(lines, leading_ws(doc_text[line_start:plan.replace_start]), plan.indent_unit)
        shown = line_break_near(doc_text, line_start).join(block)
        if _BracketRule(plan, doc_text).breaks(shown) is not True and _ParseCheck(plan, provided)(shown) \
                and not _worse_than_empty_block(plan, shown):
            return shown
    return _finish_line(plan, doc_text, text, provided)


def _worse_than_empty_block(plan: SpanPlan, block: str) -> bool:
    """Does `block` give the region around the cursor more parse errors than an empty block `{}`
    there would? The file is broken at the cursor (a `=>` with nothing after it), so the parse
    check's baseline already counts an error, and a block with one of its own (`return x +;`)
    was not worse than that."""
    snapshot = plan.snapshot
    if snapshot.tree is None:
        return False
    text, start, end = snapshot.text, plan.replace_start, plan.replace_end
    lo, hi = check_region(snapshot, start, end)

    def errors(insert: str) -> int:
        return parse_errors(snapshot.language_id, text[lo:start] + insert + text[end:hi])

    return errors(block) > errors("{}")


def _arrow_block(lines: list[str], name: str) -> list[str] | None:
    """The completion's lines up to the one that closes the brackets its first line leaves open,
    where that first line leaves a `{` open innermost (`{`, `async {`, `match y {`); None where it
    does not, where a line leaves a string or comment open (what follows is not code to read),
    where a closer closes nothing, or where nothing closes the block."""
    if len(lines) < 2:
        return None
    stack: list[str] = []
    for number, line in enumerate(lines):
        marks, quote, _ = _line_code(line, name)
        if quote is not None or not all(_pair(stack, ch) for _, ch in marks):
            return None
        if number == 0:
            if not stack or stack[-1] != "{":
                return None
        elif not stack:
            return lines[:number + 1]
    return None


def _arrow_block_lines(lines: list[str], line_indent: str, unit: str) -> list[str]:
    """A block's lines after a `=>` placed under the cursor's line (indented `line_indent`): its
    closing line at that indentation, the lines between kept relative to it, and one step deeper
    where the model wrote them no deeper than the closing line. The model writes them at their
    depth in the file or from column 0: the closing line's depth is the base either way."""
    base = indent_width(leading_ws(lines[-1]))
    inner = [indent_width(leading_ws(line)) for line in lines[1:-1] if line.strip()]
    deeper = base + indent_width(unit) - min(inner) if inner and min(inner) <= base else 0
    target = indent_width(line_indent)
    out = [lines[0].rstrip()]
    for line in lines[1:-1]:
        width = indent_width(leading_ws(line))
        out.append(render_indent(max(0, target + width - base + deeper), unit) + line.strip() if line.strip() else "")
    out.append(render_indent(target, unit) + lines[-1].strip())
    return out


# --- multi-line spans ------------------------------------------------------------------------------

@dataclass(frozen=True)
class BlockLayout:
    """How a multi-line body is laid out where its plan puts it: its lines re-indented to the
    body's depth and, after a header line, on lines of their own, with the `}` of `{ | }` pushed
    to one below them. `finish` lays out the final text with it, and the streamed steps
    (pipeline.CompletionPlan.step_state) with the same one, so what streams is placed as what is
    answered (the reports showed the body of `function f() { }` glued to the `{`)."""

    plan: SpanPlan
    cursor_ws: str | None    # the blanks before the cursor on a blank line; None: the cursor ends a header line
    indent: str              # the body's indentation (body_indent)
    suffix: str              # the text after the range that the body's last lines may repeat
    newline: str             # the line break near the cursor

    @classmethod
    def of(cls, plan: SpanPlan, doc_text: str) -> BlockLayout:
        line_start = line_bounds(doc_text, plan.replace_start)[0]
        before = doc_text[line_start: plan.replace_start]
        cursor_ws = None if before.strip() else before   # after a header the body starts on the next line
        suffix = doc_text[plan.replace_end: plan.replace_end + _SUFFIX_LINES_LOOKED_AT]
        return cls(plan, cursor_ws, body_indent(plan, doc_text, line_start, cursor_ws),
                   suffix if plan.closer_indent is None else suffix.lstrip(" \t"),
                   line_break_near(doc_text, line_start))

    def lines(self, text: str) -> list[str]:
        return reindent(text, self.plan, self.cursor_ws, self.indent)

    def trimmed(self, lines: list[str]) -> list[str]:
        """`lines` without the last ones the suffix already has."""
        return trim_duplicate_lines(lines, self.suffix)

    def render(self, body: list[str], newline: str | None = None) -> str:
        joined = (self.newline if newline is None else newline).join(body)
        if self.cursor_ws is None:
            joined = (self.newline if newline is None else newline) + joined
            if self.plan.closer_indent is not None:
                joined += (self.newline if newline is None else newline) + self.plan.closer_indent
        return joined


def _finish_block(plan: SpanPlan, doc_text: str, text: str, provided: frozenset[str] = frozenset()) -> str | None:
    layout = BlockLayout.of(plan, doc_text)
    lines = layout.lines(text)
    render = layout.render
    brackets = _BracketRule(plan, doc_text)
    trimmed = layout.trimmed(lines)
    # A closer line the suffix seems to repeat is the completion's own where it closes a bracket
    # the file leaves open: the `}` of an `if x {‸` typed above a function's last `}` (cut, the
    # completion left the `if` open and the file as broken as before).
    cut = [line for line in lines[len(trimmed):] if line.strip()]
    if not (cut and all(_CLOSER_LINE.fullmatch(line) for line in cut) and brackets.breaks(render(lines)) is False):
        lines = trimmed
    while lines and not lines[-1].strip():
        lines.pop()

    parse_not_worse = _ParseCheck(plan, provided)
    for count in range(len(lines), 0, -1):   # cut back line by line until the parse is no worse
        if not lines[count - 1].strip():
            continue
        candidate = render(lines[:count])
        # and until no closer closes what nothing leaves open: in a file broken at the cursor (a
        # `(` typed at a line's end) the parse check sees no new error in `1, 2))`
        if brackets.breaks(candidate) is not True and parse_not_worse(candidate):
            return candidate
    return None


_CLOSER_LINE = re.compile(r"[ \t]*[)\]}][)\]};,]*[ \t]*")   # `}`, `})`, `];`


def reindent(text: str, plan: SpanPlan, cursor_ws: str | None, indent: str | None = None) -> list[str]:
    """The completion's lines with indentation rebased onto `indent` (default plan.indent; relative
    nesting kept, written with the file's tabs or spaces). cursor_ws is the whitespace before the
    cursor on a blank line (line 0 starts there), None when the body starts on the next line."""
    indent = plan.indent if indent is None else indent
    raw = text.split("\n")
    if cursor_ws is None:
        inline = bool(raw[0].strip())
        while raw and not raw[0].strip():
            raw.pop(0)
        if not raw:
            return []
        base = indent_width(leading_ws(raw[0]))
        if inline and len(raw) > 1 and not _indent_sensitive(plan):
            # The model wrote its first line right after the header (`void f() {` + `int x = 1;`)
            # and its next ones at their depth in the file, which it reads: the body's depth is
            # their base, not the first line's 0 blanks (`g(x);` went a step too deep, `}` too).
            # (Python keeps the first line's base: a body on its header's line followed by more
            # lines is no Python the model could mean.)
            base = indent_width(indent)
            raw[0] = _first_label_depth(raw, plan, indent) + raw[0].lstrip(" \t")   # (the first line at that depth too)
    else:
        base = indent_width(cursor_ws + leading_ws(raw[0]))
    keep_first = plan.kind != "block_body" and cursor_ws is not None   # a new line keeps its own indent
    target = base if keep_first else indent_width(indent)
    dedent_ends = plan.kind == "block_body" and _indent_sensitive(plan)
    out: list[str] = []
    for number, line in enumerate(raw):
        body = line.strip(" \t\r")
        if not body:
            out.append("")
            continue
        if number == 0 and cursor_ws is not None:
            if keep_first:
                out.append(line.rstrip())
            else:
                missing = indent[len(cursor_ws):] if indent.startswith(cursor_ws) else ""
                out.append(missing + body)
            continue
        width = indent_width(leading_ws(line))
        if width < base and dedent_ends:
            break   # the model left the block and went on with code the suffix already has
        out.append(render_indent(max(0, target + width - base), plan.indent_unit) + body)
    return out


# A `case` / `default` label of a C-family `switch` (C, C++, Java, JavaScript, TypeScript, Go)
_CASE_LABEL = re.compile(r"[ \t]*(?:case\b|default[ \t]*:)")


def _first_label_depth(raw: list[str], plan: SpanPlan, indent: str) -> str:
    """The indentation of a body's first line the model wrote on its header's line (`switch (x) {`
    + ` case 1: ...`): the body's (`indent`), except for a `case` / `default` label, which goes
    where the model's next lines, at their depth in the file, put its labels: at the depth of its
    next label at the label's own level (the shallowest), else one step above its first line's
    statements (`case 1:` + `return 1;`), so long as that lies between the `switch` line's depth and
    the body's. Styles differ (the Linux kernel's labels sit at the `switch`'s depth, others one
    step deeper); at the body's depth, the first label stood a step right of its siblings
    (`case 1:` at 8 columns, `default:` at 4) or of its own statements."""
    if not _CASE_LABEL.match(raw[0]):
        return leading_ws(indent)
    text = plan.snapshot.text
    header = indent_width(leading_ws(text[line_bounds(text, plan.replace_start)[0]:plan.replace_start]))
    body = indent_width(indent)
    rest = [line for line in raw[1:] if line.strip() and not _CLOSER_LINE.fullmatch(line)]
    labels = [indent_width(leading_ws(line)) for line in rest if _CASE_LABEL.match(line)]
    if labels:
        depth = min(labels)
    elif rest:
        depth = indent_width(leading_ws(rest[0])) - indent_width(plan.indent_unit)
    else:
        return leading_ws(indent)
    return render_indent(depth, plan.indent_unit) if header <= depth <= body else leading_ws(indent)


def body_indent(plan: SpanPlan, doc_text: str, line_start: int, cursor_ws: str | None) -> str:
    """The indentation of a block body's lines: the header's plus one step of the file's own.

    The steps the file's block headers take to their bodies near the cursor
    (planner.lines.block_steps, which the planner's own unit reads too: detect_indent_unit)
    decide, not the smallest indentation in sight: a file whose functions are indented by 4 and
    whose nested blocks by 2 (5 of HumanEval's single-line tasks, 18 multi-line ones) had a body
    typed 2 deeper than its `if` pushed 2 deeper still. The typed indentation stands where its
    step is one of them, else their most common one (the planner's, where it is). Where the
    planner kept an indentation typed deeper than its own step, or the file shows no step, or the
    typed blanks are already deeper than the step read (they stand: they are before the cursor),
    the plan's indentation stays."""
    if plan.kind != "block_body":
        return plan.indent
    if cursor_ws is None:        # the cursor ends the header line itself
        header = doc_text[line_start:plan.replace_start]
    else:
        previous = previous_nonblank_line(doc_text, line_start)
        if previous is None:
            return plan.indent
        header = previous[1]
    header_width = indent_width(leading_ws(header))
    planned_step = indent_width(plan.indent) - header_width
    steps = block_steps(doc_text, plan.replace_start)
    if not steps:
        return plan.indent
    typed = indent_width(cursor_ws) - header_width if cursor_ws is not None else 0
    if typed > 0 and typed in steps:
        step = typed
    elif planned_step == indent_width(plan.indent_unit):
        step = usual_step(steps, prefer=planned_step)
    else:
        return plan.indent       # the editor indented deeper than a step: the planner kept that
    if cursor_ws is not None and header_width + step < indent_width(cursor_ws):
        return plan.indent
    return render_indent(header_width + step, plan.indent_unit)


def trim_duplicate_lines(lines: list[str], suffix: str) -> list[str]:
    """Cut the completion where its lines start repeating the suffix's next non-blank lines: either
    all its remaining lines match, or at least two do (the model rewrote what follows)."""
    completion = [(number, line.strip(), indent_width(leading_ws(line))) for number, line in enumerate(lines)
                  if line.strip()]
    if not completion:
        return lines
    following: list[tuple[str, int]] = []
    for line in suffix.split("\n"):
        if line.strip():
            following.append((line.strip(), indent_width(leading_ws(line))))
            if len(following) >= len(completion):
                break
    if not following:
        return lines
    for position, (number, _, _) in enumerate(completion):
        matched = 0
        while (position + matched < len(completion) and matched < len(following)
               and completion[position + matched][1] == following[matched][0]):
            matched += 1
        # A lone keyword closer must also match its depth: the `end` of the Lua `if` the model
        # filled is not the `end` of the function around it. (Punctuation closers need not: the
        # parse check catches a doubled `}`, and re-indentation may have moved the model's own;
        # two or more lines in a row are a rewrite at any depth.)
        # Any line with a word in it, too: `return False` inside the `if` is not the function's
        # `return False` after it (the right line was cut as a rewrite of the next, nothing shown).
        lone = (matched == 1 and any(c.isalnum() or c == "_" for c in completion[position][1])
                and completion[position][2] != following[0][1])
        if matched and not lone and (position + matched == len(completion) or matched >= 2):
            if _removable("\n".join(lines[:number]), "\n".join(lines[number:])):
                return lines[:number]
    return lines


def _indent_sensitive(plan: SpanPlan) -> bool:
    return facts_for(plan.snapshot.language_id).indent_sensitive


# --- parse check -----------------------------------------------------------------------------------

class _ParseCheck:
    """Does inserting a text over the plan's range keep the enclosing region's error count?
    The region and its error count without the completion are computed once per finish() (and
    once more per statement a continuation clause extends it to)."""

    def __init__(self, plan: SpanPlan, provided: frozenset[str] = frozenset()) -> None:
        self.plan = plan
        self.provided = provided   # names the completion may call though the file has none (finish)
        self.snapshot = plan.snapshot
        self.regions: dict[int, tuple[int, bool]] = {}   # region start -> (its errors, judge the whole file)
        self.lo = self.hi = -1
        self.python_baseline: object = _UNSET
        self.indentation_error = False
        self.star_import: bool | None = None
        self.repair_tried = False   # _repairs_file reparsed the whole file once already

    def _region(self, lo: int) -> tuple[int, bool]:
        """The error count of [lo, self.hi) without the completion, and whether to judge the whole
        file instead."""
        if lo not in self.regions:
            snapshot, text = self.snapshot, self.snapshot.text
            baseline = parse_errors(snapshot.language_id, text[lo: self.hi])
            # A region that does not parse alone in a file that does (a lone `}` between two
            # functions, a header whose block is cut off, a Go statement without its line break)
            # hides what a completion breaks inside it: the file is reparsed whole then,
            # incrementally from its tree (2-4 ms at 120 kB: WHOLE_FILE_CHECK_MAX_CHARS).
            whole_file = baseline > 0 and len(text) <= WHOLE_FILE_CHECK_MAX_CHARS and snapshot.error_count() == 0
            self.regions[lo] = (baseline, whole_file)
        return self.regions[lo]

    def __call__(self, insert: str) -> bool:
        snapshot, plan = self.snapshot, self.plan
        if snapshot.tree is None:
            return True   # line rules: nothing to compare
        text = snapshot.text
        if self.lo < 0:
            self.lo, self.hi = check_region(snapshot, plan.replace_start, plan.replace_end)
        lo = self.lo
        if snapshot.language_id == "python":
            # An `elif` / `else` / `except` / `finally` the completion writes continues a statement
            # that may begin above the region (the region is the smallest statement around the
            # cursor: the inner block the clause follows): alone there it is an error, and 6 of
            # 8 right multi-line answers that began with one were refused. The region then starts
            # with that statement, so the clause is judged with its header; a clause with no
            # header at its depth above it gets no such start, and is refused as before.
            lo = min(lo, _clause_statement_start(snapshot, plan.replace_start, insert, self.lo, self.hi))
        baseline, whole_file = self._region(lo)
        if whole_file:
            edited_file = snapshot.reparsed(text[:plan.replace_start] + insert + text[plan.replace_end:],
                                            plan.replace_start, plan.replace_end, plan.replace_start + len(insert))
            if edited_file.error_count() > 0:
                return False
        elif parse_errors(snapshot.language_id,
                          text[lo: plan.replace_start] + insert + text[plan.replace_end: self.hi]) > baseline \
                and not self._repairs_file(insert):
            return False
        if snapshot.language_id != "python" or len(text) > PYTHON_CHECK_MAX_CHARS:
            return True
        if self.python_baseline is _UNSET:
            self.python_baseline, self.indentation_error = python_first_error(text)
        edited_file = text[:plan.replace_start] + insert + text[plan.replace_end:]
        tree, found, _ = python_parse(edited_file)
        if tree is not None:
            return not self._names_unknown(tree, insert)
        if found is _UNKNOWN:
            return True
        if self.python_baseline is None:
            return False                    # the file parsed; with the completion it does not
        if self.python_baseline is _UNKNOWN:
            return True
        delta = len(insert) - (plan.replace_end - plan.replace_start)
        # The file now first fails inside the completion's own text (it opens a string it never
        # closes: `"`, `':`), whatever the file's own error: that text is broken.
        if plan.replace_start <= found < plan.replace_start + len(insert.rstrip()):
            return False
        if self.indentation_error:
            # The file's own error is the block structure of the statement being written (a
            # missing `for ...:` header leaves the next line indented too deep): a completion
            # that leaves it in that top-level statement does not fix the line (`return 1`
            # there was shown, and 89 of 616 shown single lines then failed with IndentationError).
            line_start = text.rfind("\n", 0, plan.replace_start) + 1
            top = _TOP_LEVEL_LINE.search(text, plan.replace_end)
            top_end = top.start() if top else len(text)
            if line_start <= self.python_baseline <= top_end:
                return found > top_end + delta
        # The file's own error, moved by the edit (an error inside the replaced text: at its start).
        original = self.python_baseline
        if original >= plan.replace_end:
            original += delta
        elif original > plan.replace_start:
            original = plan.replace_start
        return found >= original

    def _repairs_file(self, insert: str) -> bool:
        """Does the file, broken without the completion, parse without an error with it? In a
        broken file the region is the broken piece alone (the `a = 1,` under a Lua table's
        `local t = {` the user has not closed yet), which a completion that closes what the file
        leaves open (`b = 2,` + `}`) cannot fix on its own: it was refused. Only read on the way
        to a refusal, in files of WHOLE_FILE_CHECK_MAX_CHARS or less, and once per completion (the
        longest text the region refuses: a multi-line completion cut back line by line would
        otherwise reparse the whole file once a line, 2-4 ms each at 120 kB)."""
        snapshot, plan = self.snapshot, self.plan
        text = snapshot.text
        if self.repair_tried or snapshot.error_count() == 0 or len(text) > WHOLE_FILE_CHECK_MAX_CHARS:
            return False
        self.repair_tried = True
        edited_file = snapshot.reparsed(text[:plan.replace_start] + insert + text[plan.replace_end:],
                                        plan.replace_start, plan.replace_end, plan.replace_start + len(insert))
        return edited_file.error_count() == 0

    def _names_unknown(self, tree: ast.Module, insert: str) -> bool:
        """Does the inserted text call a name that nothing defines: a callee (`f(...)`, or the
        object of `o.method(...)`) that is not a builtin, not bound by the completion itself and
        not written anywhere in the file (a name the file mentions only in a comment or further
        down counts as defined)? The shipped model calls `assert_equal(x)` and
        `self.assertEqual(x)` in plain functions: this refuses 63 of the 518 single lines it
        showed, all failing but one that is never reached (docs/eval.md). Only calls are judged:
        a plain unknown name (`return total`) may be a variable the user is about to bind, and a
        random model's one-word junk stays what the server tests see. A file that itself reads names it never
        binds (a fragment, or a script whose names its host injects) or has a `from m import *`
        gets its names from where this cannot look: it is not checked."""
        text, start = self.snapshot.text, self.plan.replace_start
        if self.star_import is None:
            self.star_import = _STAR_IMPORT.search(text) is not None
        if self.star_import:
            return False
        # Where the inserted text lies, as ast counts: tree-sitter's points (columns in UTF-8
        # bytes), with 1-based lines
        row, column = point(text, start, is_ascii=False)
        end_row, end_column = end_point((row, column), insert.rstrip())
        inside = ((row + 1, column), (end_row + 1, end_column))
        called, bound = _names_in(tree, *inside)
        if not any(name not in bound and name not in _ALWAYS_DEFINED and name not in self.provided
                   and not _mentions(text, name) for name in called):
            return False
        return not _reads_unbound_names(tree, *inside)   # walks the whole file: only on the way to a refusal


_STAR_IMPORT = re.compile(r"^[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]+\*", re.MULTILINE)
# Names no file needs to define: the builtins, and what Python gives every module, class and method.
_ALWAYS_DEFINED = frozenset(dir(builtins)) | frozenset({
    "__file__", "__builtins__", "__cached__", "__path__", "__annotations__", "__dict__", "__module__",
    "__qualname__", "__class__"})
_ANNOTATION_FIELDS = frozenset({"annotation", "returns"})   # not evaluated under `from __future__ import annotations`


def _children(node: ast.AST):
    """The child nodes of `node`, annotations left out (they may never be evaluated)."""
    for field, value in ast.iter_fields(node):
        if field in _ANNOTATION_FIELDS:
            continue
        for child in value if isinstance(value, list) else (value,):
            if isinstance(child, ast.AST):
                yield child


def _names_in(tree: ast.AST, start: tuple[int, int], end: tuple[int, int]) -> tuple[set[str], set[str]]:
    """The callees' names (the `o` of `o.method(...)`), and the names bound, by the nodes of `tree`
    inside [start, end) ((line, UTF-8 column) as ast counts them). Only the nodes around that
    range are visited, so a big file costs little more than a small one. Iterative: a long
    expression nests deeper than Python's recursion limit."""
    called: set[str] = set()
    bound: set[str] = set()
    stack = [tree]
    while stack:
        for child in _children(stack.pop()):
            if getattr(child, "end_lineno", None) is not None:
                if (child.end_lineno, child.end_col_offset) <= start or (child.lineno, child.col_offset) >= end:
                    continue
                if start <= (child.lineno, child.col_offset):
                    if isinstance(child, ast.Call):
                        callee = child.func
                        while isinstance(callee, ast.Attribute):
                            callee = callee.value
                        if isinstance(callee, ast.Name):
                            called.add(callee.id)
                    _bind(child, bound)
            elif not hasattr(child, "lineno"):
                _bind(child, bound)   # no position of its own (arguments, comprehension): its children say
            stack.append(child)
    return called, bound


def _reads_unbound_names(tree: ast.AST, start: tuple[int, int], end: tuple[int, int]) -> bool:
    """Does the file outside [start, end) read a name that nothing in it binds and no builtin is?"""
    read: set[str] = set()
    bound: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if not (start <= (node.lineno, node.col_offset) < end):
                read.add(node.id)
        else:
            _bind(node, bound)
        stack.extend(_children(node))
    return bool(read - bound - _ALWAYS_DEFINED)


def _bind(node: ast.AST, bound: set[str]) -> None:
    """Add the names `node` binds to `bound`."""
    if isinstance(node, ast.Name):
        if not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
    elif isinstance(node, ast.arg):
        bound.add(node.arg)
    elif isinstance(node, ast.alias):
        bound.add((node.asname or node.name).split(".")[0])
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        bound.update(node.names)
    elif isinstance(node, ast.MatchMapping) and node.rest:
        bound.add(node.rest)
    elif isinstance(getattr(node, "name", None), str):
        bound.add(node.name)   # def, class, except ... as, match captures, type parameters


def _mentions(text: str, name: str) -> bool:
    """Is `name` written in `text` as a word of its own (code, comment or string alike)?"""
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) is not None


_CLAUSE = re.compile(r"[ \t]*(elif|else|except|finally)\b")
_CLAUSE_HEADER = re.compile(r"[ \t]*(?:async[ \t]+)?(if|elif|else|try|except|finally|for|while)\b")
_CLAUSE_OWNERS = frozenset({"if_statement", "try_statement", "for_statement", "while_statement"})
_CLAUSE_LOOK_BACK = 4 * REGION_LIMIT_BYTES   # how far above a clause its header is looked for


def _clause_statement_start(snapshot: Snapshot, start: int, insert: str, lo: int, hi: int) -> int:
    """Where the checked region must start for the continuation clauses `insert` writes at `start`
    to be judged with their statement: the start of the line of the `if` / `try` / `for` / `while`
    statement whose last clause header (a line at the clause's depth, the nearest above it that is
    not deeper) is above `lo`. `lo` when there is none, when the header is inside the completion
    itself, or when the region would grow past _CLAUSE_LOOK_BACK."""
    text = snapshot.text
    line_start = text.rfind("\n", 0, start) + 1
    lines = (text[line_start:start] + insert).split("\n")
    best = lo
    for number, line in enumerate(lines):
        if not _CLAUSE.match(line) or (number == 0 and text[line_start:start].strip()):
            continue              # not a clause, or one the file already had before the cursor
        depth = indent_width(leading_ws(line))
        if any(other.strip() and not other.lstrip().startswith("#") and indent_width(leading_ws(other)) <= depth
               for other in lines[:number]):
            continue              # its header is the completion's own line (or the cursor's line)
        header = _line_above_at_most(text, line_start, depth, max(0, hi - _CLAUSE_LOOK_BACK))
        if header is None or header >= lo:
            continue
        header_line = text[header:line_bounds(text, header)[1]]
        if indent_width(leading_ws(header_line)) != depth or not _CLAUSE_HEADER.match(header_line):
            continue              # no statement at the clause's depth to continue: judged as before
        keyword = snapshot.byte(header + len(leading_ws(header_line)))
        node = snapshot.tree.root_node.descendant_for_byte_range(keyword, keyword)
        while node is not None and node.type not in _CLAUSE_OWNERS:
            node = node.parent
        if node is None:
            continue
        owner = text.rfind("\n", 0, snapshot.char(node.start_byte)) + 1
        if hi - owner <= _CLAUSE_LOOK_BACK:
            best = min(best, owner)
    return best


def _line_above_at_most(text: str, line_start: int, depth: int, floor: int) -> int | None:
    """The start of the nearest line above the line at `line_start` that is not blank, not a
    comment, and indented `depth` columns or less; None when none starts at or after `floor`."""
    end = line_start - 1
    while end > floor:
        start = text.rfind("\n", 0, end) + 1
        if start < floor:
            return None
        line = text[start:end]
        body = line.strip()
        if body and not body.startswith("#") and indent_width(leading_ws(line)) <= depth:
            return start
        end = start - 1
    return None


PYTHON_CHECK_MAX_CHARS = 256_000
WHOLE_FILE_CHECK_MAX_CHARS = 128_000   # an incremental reparse of a 120 kB file: 2-4 ms on a busy 2-core CPU
_UNSET, _UNKNOWN = object(), object()


_TOP_LEVEL_LINE = re.compile(r"\n(?=[^\s#])")   # the start of the next line at column 0


def python_error_offset(text: str) -> int | object | None:
    """The character offset of CPython's first syntax error in `text`, None when it parses, or
    _UNKNOWN when the parser cannot say (null bytes, nesting too deep for it)."""
    return python_first_error(text)[0]


def python_first_error(text: str) -> tuple[int | object | None, bool]:
    """python_error_offset, and whether that error is an IndentationError."""
    return python_parse(text)[1:]


def python_parse(text: str) -> tuple[ast.Module | None, int | object | None, bool]:
    """(the tree, None, False) when `text` parses, else (None, python_error_offset,
    whether that error is an IndentationError)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # SyntaxWarning: invalid escape sequences and the like
            return ast.parse(text), None, False
    except SyntaxError as exc:
        indentation = isinstance(exc, IndentationError)
        if exc.lineno is None:
            return None, 0, indentation
        starts = [0]
        for line in text.split("\n")[:exc.lineno - 1]:
            starts.append(starts[-1] + len(line) + 1)
        return None, starts[min(exc.lineno - 1, len(starts) - 1)] + max((exc.offset or 1) - 1, 0), indentation
    except (ValueError, RecursionError, MemoryError):
        return None, _UNKNOWN, False

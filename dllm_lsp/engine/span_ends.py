"""Where a span may end: not inside a bracket, string or block comment that the span itself opened.

A model trained to end its spans with pads still ends some of them too early: the CPU preview's
continued training (docs/training.md, "A third CPU run") left a `(` open in 123 of 1033
HumanEval single lines and a string unterminated in 57. Such a line is wrong whatever follows,
and post-processing can only drop it. The decode loop asks `SpanEnds.allows` before it lets a
slot end at its frontier (engine/denoise.py, `refuse_open_ends`); refused, the model's best
token that is not an end takes the place, so the span goes on to close what it opened.

The judgement is lexical, per language (brackets, string and comment delimiters), and only about
what the *span* opened: text of the line before the cursor may leave brackets open (a call split
over lines), and the rest of the line after the cursor may close what the span opened (an
editor's auto-inserted `)` or `"`). Where the cursor already sits inside a string or block
comment (a docstring, say), the span starts inside it too: an apostrophe in the prose of a
docstring opens nothing. A language without an entry here gets no rule (`for_request` -> None).
"""
from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from .types import InfillRequest

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {v: k for k, v in _OPENERS.items()}


@dataclass(frozen=True)
class Lexicon:
    """A language's delimiters, as far as balance goes."""

    line_comments: tuple[str, ...] = ()
    block_comments: tuple[tuple[str, str], ...] = ()
    strings: tuple[tuple[str, str, bool], ...] = ()   # (open, close, may span lines), longest first
    # `'` opens a character literal only when one (possibly escaped) character and a `'` follow:
    # otherwise it is a Rust lifetime or label (`'a`), or C++'s digit separator, and opens nothing.
    char_literals: bool = False


_C_LIKE = Lexicon(("//",), (("/*", "*/"),), (('"', '"', False),), char_literals=True)
LEXICONS: dict[str, Lexicon] = {
    "python": Lexicon(("#",), (), (('"""', '"""', True), ("'''", "'''", True), ('"', '"', False), ("'", "'", False))),
    "javascript": Lexicon(("//",), (("/*", "*/"),), (('"', '"', False), ("'", "'", False), ("`", "`", True))),
    "c": _C_LIKE,
    "cpp": _C_LIKE,
    "java": Lexicon(("//",), (("/*", "*/"),), (('"""', '"""', True), ('"', '"', False)), char_literals=True),
    "go": Lexicon(("//",), (("/*", "*/"),), (('"', '"', False), ("`", "`", True)), char_literals=True),
    "rust": Lexicon(("//",), (("/*", "*/"),), (('"', '"', True),), char_literals=True),
    # Lua's long brackets (`[[ ]]`, `--[[ ]]`) come before the short forms that share their start.
    "lua": Lexicon(("--",), (("--[[", "]]"),), (("[[", "]]", True), ('"', '"', False), ("'", "'", False))),
}
LEXICONS["typescript"] = LEXICONS["tsx"] = LEXICONS["javascript"]


class Token(NamedTuple):
    start: int
    kind: str          # "string", "comment" (block), "line" (a line comment), "char" or "bracket"
    opener: str        # its opening delimiter (the bracket itself for a bracket)
    closed: bool       # a string or comment ended before the text did (a one-line string: its line)
    multiline: bool    # a string or comment that may span lines


class _Scanner:
    """One regex over a text's comments, strings and brackets, in the order a lexer meets them
    (block comments before line comments, so Lua's `--[[` is not read as `--`)."""

    def __init__(self, lexicon: Lexicon) -> None:
        self.delims: list[tuple[str, str, str, bool]] = []    # (kind, open, close, may span lines)
        parts: list[str] = []
        for opener, closer in lexicon.block_comments:
            parts.append(self._delimited(opener, closer, True, "comment"))
        for opener in lexicon.line_comments:
            self.delims.append(("line", opener, "", False))
            parts.append(f"(?P<d{len(self.delims) - 1}>{re.escape(opener)}[^\n]*)")
        for opener, closer, multiline in lexicon.strings:
            parts.append(self._delimited(opener, closer, multiline, "string"))
        if lexicon.char_literals:
            parts.append(r"(?P<char>'(?:\\[^\n]|[^'\\\n])')")
        parts.append(r"(?P<bracket>[()\[\]{}])")
        self.pattern = re.compile("|".join(parts))

    def _delimited(self, opener: str, closer: str, multiline: bool, kind: str) -> str:
        index = len(self.delims)
        self.delims.append((kind, opener, closer, multiline))
        body_char = r"[\s\S]" if multiline else r"[^\n]"
        escape = r"\\[\s\S]|" if kind == "string" else ""
        # Lazily up to the first closer; an unclosed one runs to the end of the text (or line).
        end = r"\Z" if multiline else r"(?=\n)|\Z"
        return (f"(?P<d{index}>{re.escape(opener)}(?:{escape}{body_char})*?"
                f"(?:(?P<c{index}>{re.escape(closer)})|{end}))")

    def tokens(self, text: str) -> Iterator[Token]:
        """Every token of `text`, in order."""
        for match in self.pattern.finditer(text):
            group = match.lastgroup
            if group == "bracket":
                yield Token(match.start(), "bracket", match.group(), True, False)
            elif group == "char":
                yield Token(match.start(), "char", "'", True, False)
            else:
                index = int(group[1:])
                kind, opener, _, multiline = self.delims[index]
                closed = kind == "line" or match.group(f"c{index}") is not None
                yield Token(match.start(), kind, opener, closed, multiline)


@dataclass
class SlotEnds:
    """One slot's end rule: the text around it, and a memo of judged spans."""

    scanner: _Scanner
    resume: str           # the opener of what the cursor sits inside ("" in code): the span starts inside it
    after_line: str       # the text after the slot up to the end of its line
    single_line: bool
    _memo: dict[str, bool] = field(default_factory=dict)

    def allows(self, span_text: str) -> bool:
        """Whether the slot may end after `span_text` (what it holds so far)."""
        known = self._memo.get(span_text)
        if known is None:
            known = self._memo[span_text] = self._judge(span_text)
        return known

    def _judge(self, span_text: str) -> bool:
        if self.single_line and "\n" in span_text:
            return True      # the line ended already: what follows the break is cut off anyway
        lo = len(self.resume)
        hi = lo + len(span_text)
        stack: list[tuple[str, bool]] = []          # (opener, opened inside the span)
        for token in self.scanner.tokens(self.resume + span_text + self.after_line):
            own = lo <= token.start < hi
            if token.kind == "bracket":
                if token.opener in _OPENERS:
                    stack.append((token.opener, own))
                elif stack and stack[-1][0] == _CLOSERS[token.opener]:
                    stack.pop()
            elif not token.closed and own:
                return False             # a string or block comment the span opened runs on past the line
        return not any(own for _, own in stack)


def cursor_state(scanner: _Scanner, before: str) -> str:
    """The opener of the string or comment that `before` ends inside ("" in code)."""
    last = None
    for last in scanner.tokens(before):
        pass
    if last is None or last.kind in ("bracket", "char") or (last.closed and last.kind != "line"):
        return ""
    # A line comment or an unclosed one-line string stops at its line's end: it holds the cursor
    # only if that line is the cursor's.
    return last.opener if last.multiline or "\n" not in before[last.start:] else ""


class SpanEnds:
    """The end rules of a request's slots (None for a slot with no rule)."""

    def __init__(self, slots: list[SlotEnds | None]) -> None:
        self.slots = slots

    def allows(self, slot: int, span_text: str) -> bool:
        rule = self.slots[slot]
        return True if rule is None else rule.allows(span_text)

    @classmethod
    def for_request(cls, request: InfillRequest) -> "SpanEnds | None":
        """The request's rules, or None when its language has no lexicon."""
        if (request.language or "") not in LEXICONS:
            return None
        scanner = _scanner(request.language)
        rules: list[SlotEnds | None] = []
        for k, slot in enumerate(request.slots):
            before, after = request.pieces[k], request.pieces[k + 1]
            rules.append(SlotEnds(scanner, cursor_state(scanner, before), after.split("\n", 1)[0], slot.single_line))
        return cls(rules)


@functools.cache
def _scanner(language: str) -> _Scanner:
    """One compiled scanner per language (built on first use)."""
    return _Scanner(LEXICONS[language])

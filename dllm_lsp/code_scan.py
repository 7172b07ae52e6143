"""One reading of code's comments, strings and brackets, without a parser.

Two places judge brackets and quotes from text alone: the engine, while decoding, asks whether a
span may end (engine/span_ends.py: a span's few characters, many times a request, and once the
text before each slot), and post-processing asks what a one-line completion, or each line of a
multi-line one, leaves open (postprocess.py). Both read through the `Scanner` here. What they
read differently is the `Lexicon` each gives it: which delimiters, whether a string may span
lines, what a backslash escapes, and the named rule for a `'` that may open no string
(`char_literal`, `digit_separator`, `rust_char_or_lifetime`). The engine's lexicons are a table
per language (span_ends.LEXICONS); post-processing builds its own from a language's name and what
the asking rule wants read (postprocess._scanner).

It imports nothing of the package: it sits below the engine and the pipeline alike, so the engine
reads code the way post-processing does without importing the pipeline's modules.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

# What a backslash escapes inside a string or comment.
NO_ESCAPES = ""
LINE_ESCAPES = "line"   # the next character of its line: a backslash before a line break escapes nothing
ANY_ESCAPES = "any"     # the next character, a line break too (a one-line string goes on over it)
_ESCAPE = {NO_ESCAPES: "", LINE_ESCAPES: r"\\[^\n]|", ANY_ESCAPES: r"\\[\s\S]|"}


@dataclass(frozen=True)
class Delimited:
    """A string or block comment: from `opener` up to the first `closer` after it, or, unclosed, to
    the end of its line (`multiline` False: the line break is not part of it) or of the text."""

    kind: str                 # "string" or "comment"
    opener: str
    closer: str
    multiline: bool
    escapes: str = NO_ESCAPES
    # Lua's long brackets: any number of `=` between the opener's last two characters (`[==[`,
    # `--[==[`), closed only by a closer with as many between its two (`]==]`). Their tokens are
    # named by `opener` (`[[`) whatever the level.
    levels: bool = False

    def pattern(self, index: int) -> str:
        """The regex of this delimited text as group `d<index>`; its closer, when there, is group
        `c<index>`. The body is read lazily up to the first closer, a backslash first taking the
        character it escapes."""
        opener, closer = re.escape(self.opener), re.escape(self.closer)
        if self.levels:
            opener = f"{re.escape(self.opener[:-1])}(?P<e{index}>=*){re.escape(self.opener[-1])}"
            closer = f"{re.escape(self.closer[0])}(?P=e{index}){re.escape(self.closer[1:])}"
        body = r"[\s\S]" if self.multiline else r"[^\n]"
        end = r"\Z" if self.multiline else r"(?=\n)|\Z"
        return f"(?P<d{index}>{opener}(?:{_ESCAPE[self.escapes]}{body})*?(?:(?P<c{index}>{closer})|{end}))"


# A named rule for a `'`: where the code goes on after the `'` at `at` of `text` when the rule
# reads it as code that opens nothing (a char literal, a lifetime, a digit separator), or `at`
# itself where the `'` is not the rule's (the lexicon's strings then read it, or nothing does).
ApostropheRule = Callable[[str, int], int]


@dataclass(frozen=True)
class Lexicon:
    """What a scanner reads. At each position it tries, in this order (the order a lexer meets
    them in): block comments (before line comments, so Lua's `--[[` is not read as `--`), line
    comments (to the end of their line), a `'` the `apostrophe` rule reads, strings (in the order
    given: longest opener first), brackets. Any other character is code that holds nothing."""

    block_comments: tuple[Delimited, ...] = ()
    line_comments: tuple[str, ...] = ()
    apostrophe: ApostropheRule | None = None
    strings: tuple[Delimited, ...] = ()
    brackets: str = "()[]{}"


class Token(NamedTuple):
    start: int
    kind: str          # "string", "comment" (block), "line" (a line comment), "char" (a `'` the
                       # apostrophe rule read as code) or "bracket"
    opener: str        # its opening delimiter (Delimited.opener; the bracket itself for a bracket)
    closed: bool       # a string or comment ended before the text did (a one-line string: its line)
    multiline: bool    # a string or comment that may span lines
    end: int           # where the text after it starts


_NOTHING = "(?!)"      # a lexicon with nothing to read matches nowhere (an empty regex matches everywhere)


class Scanner:
    """A lexicon compiled into one regex; `tokens(text)` reads a text with it."""

    def __init__(self, lexicon: Lexicon) -> None:
        self.lexicon = lexicon
        self._delimited = (*lexicon.block_comments, *lexicon.strings)     # group d<i> is _delimited[i]
        comments = [d.pattern(i) for i, d in enumerate(lexicon.block_comments)]
        comments += [f"(?P<l{i}>{re.escape(opener)}[^\n]*)" for i, opener in enumerate(lexicon.line_comments)]
        rest = [d.pattern(len(lexicon.block_comments) + i) for i, d in enumerate(lexicon.strings)]
        if lexicon.brackets:
            rest.append(f"(?P<b>[{re.escape(lexicon.brackets)}])")
        apostrophe = ["(?P<a>')"] if lexicon.apostrophe is not None else []
        self._next = re.compile("|".join(comments + apostrophe + rest) or _NOTHING)
        # What a `'` the rule leaves is read as: the rest of the lexicon, from that `'`.
        self._after_rule = re.compile("|".join(comments + rest) or _NOTHING)

    def tokens(self, text: str) -> Iterator[Token]:
        """Every token of `text`, in order."""
        search, at = self._next.search, 0
        while (match := search(text, at)) is not None:
            start, group = match.start(), match.lastgroup
            if group == "a":
                after = self.lexicon.apostrophe(text, start)
                if after > start:
                    yield Token(start, "char", "'", True, False, after)
                    at = after
                    continue
                match = self._after_rule.match(text, start)
                if match is None:
                    at = start + 1
                    continue
                group = match.lastgroup
            at = match.end()
            if group == "b":
                yield Token(start, "bracket", match.group(), True, False, at)
            elif group[0] == "l":
                yield Token(start, "line", self.lexicon.line_comments[int(group[1:])], True, False, at)
            else:
                index = int(group[1:])
                piece = self._delimited[index]
                yield Token(start, piece.kind, piece.opener, match.group(f"c{index}") is not None,
                            piece.multiline, at)


# --- what a `'` is ----------------------------------------------------------------------------------

_CHAR_LITERAL = re.compile(r"'(?:\\[^\n]|[^'\\\n])'")


def char_literal(text: str, at: int) -> int:
    """A character literal of one (possibly escaped) character (`'('`, `'\\n'`) holds no bracket;
    any other `'` is not the rule's (a Rust lifetime `'a`, C++'s digit separator: with no `'`
    string in the lexicon it opens nothing). The engine's span ends read C, C++, Java, Go and
    Rust so."""
    literal = _CHAR_LITERAL.match(text, at)
    return literal.end() if literal else at


def digit_separator(text: str, at: int) -> int:
    """C / C++: a `'` inside a number (`1'000'000`, `0xFF'FF`) is code, and the number goes on
    after it; any other `'` is not the rule's (it opens a char literal, read as a string)."""
    return at + 1 if _digit_separator(text, at) else at


_RUST_CHAR = re.compile(r"'(?:[^'\\\n]|\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F_]{1,8}\}|.))'")
_RUST_LIFETIME = re.compile(r"'[^\W\d]\w*")   # `'a`, `'static`, a loop label `'outer`
_RUST_VALUE_BEFORE = tuple("=([{!|^%*/;")


def rust_char_or_lifetime(text: str, at: int) -> int:
    """Rust: a char literal (`')'`, `'\\x41'`, `'\\u{1F600}'`: its bracket is no bracket), or a
    lifetime or loop label (`'a`, `'outer`) where one may stand, is code; any other `'` is not
    the rule's (it opens a char literal left open, read as a string)."""
    literal = _RUST_CHAR.match(text, at) or (_rust_lifetime(text, at) and _RUST_LIFETIME.match(text, at))
    return literal.end() if literal else at


def _rust_lifetime(line: str, at: int) -> bool:
    """Can the `'` at `at` in Rust start a lifetime or a loop label (`&'a`, `<'a>`, `T: 'a`,
    `break 'outer`) rather than a char literal? Not right after a word (`b'a`: a byte literal), nor
    after what a value follows (`= 'a`, `('a`, `!'a`, `=> 'a`, `{ 'a`)."""
    if at and (line[at - 1].isidentifier() or line[at - 1].isdigit()):
        return False
    before = line[max(0, at - 64):at].rstrip(" \t")
    return not (before.endswith(_RUST_VALUE_BEFORE) or before.endswith("=>"))


def _digit_separator(line: str, at: int) -> bool:
    """Is the `'` at `at` inside a number (`1'000`, `0xFF'FF`), not the start of a char literal
    (`u8'a'` starts with a letter)? Looks back at most 64 characters."""
    start = at
    while start > max(0, at - 64) and (line[start - 1].isalnum() or line[start - 1] in "_.'"):
        start -= 1
    return line[start:start + 1].isdigit() and line[at + 1:at + 2].isalnum()

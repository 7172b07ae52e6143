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
from dataclasses import dataclass, field

from dllm_lsp.code_scan import ANY_ESCAPES, Delimited, Lexicon, Scanner, char_literal

from .types import InfillRequest

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {v: k for k, v in _OPENERS.items()}


def _strings(*specs: tuple[str, str, bool]) -> tuple[Delimited, ...]:
    """(open, close, may span lines) -> strings in which a backslash escapes the next character,
    a line break too. Go's raw strings and Lua's long strings read so as well, though neither has
    escapes: a backslash right before their closer is rare in a span."""
    return tuple(Delimited("string", opener, closer, multiline, ANY_ESCAPES) for opener, closer, multiline in specs)


def _comments(*pairs: tuple[str, str]) -> tuple[Delimited, ...]:
    """(open, close) -> block comments."""
    return tuple(Delimited("comment", opener, closer, True) for opener, closer in pairs)


# A language's delimiters, as far as balance goes (code_scan.Lexicon), strings longest opener
# first. Where `'` opens no string, `char_literal` reads it: one (possibly escaped) character and
# a `'` are a character literal; any other `'` (a Rust lifetime or label `'a`, C++'s digit
# separator) opens nothing.
_BLOCK = _comments(("/*", "*/"))
_C_LIKE = Lexicon(block_comments=_BLOCK, line_comments=("//",), apostrophe=char_literal,
                  strings=_strings(('"', '"', False)))
LEXICONS: dict[str, Lexicon] = {
    "python": Lexicon(line_comments=("#",), strings=_strings(('"""', '"""', True), ("'''", "'''", True),
                                                            ('"', '"', False), ("'", "'", False))),
    "javascript": Lexicon(block_comments=_BLOCK, line_comments=("//",),
                          strings=_strings(('"', '"', False), ("'", "'", False), ("`", "`", True))),
    "c": _C_LIKE,
    "cpp": _C_LIKE,
    "java": Lexicon(block_comments=_BLOCK, line_comments=("//",), apostrophe=char_literal,
                    strings=_strings(('"""', '"""', True), ('"', '"', False))),
    "go": Lexicon(block_comments=_BLOCK, line_comments=("//",), apostrophe=char_literal,
                  strings=_strings(('"', '"', False), ("`", "`", True))),
    "rust": Lexicon(block_comments=_BLOCK, line_comments=("//",), apostrophe=char_literal,
                    strings=_strings(('"', '"', True))),
    # Lua's long brackets (`[[ ]]`, `--[[ ]]`) come before the short forms that share their start
    # (the scanner tries block comments before line comments, strings before brackets).
    "lua": Lexicon(block_comments=_comments(("--[[", "]]")), line_comments=("--",),
                   strings=_strings(("[[", "]]", True), ('"', '"', False), ("'", "'", False))),
}
LEXICONS["typescript"] = LEXICONS["tsx"] = LEXICONS["javascript"]


@dataclass
class SlotEnds:
    """One slot's end rule: the text around it, and a memo of judged spans."""

    scanner: Scanner
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


def cursor_state(scanner: Scanner, before: str) -> str:
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
def _scanner(language: str) -> Scanner:
    """One compiled scanner per language (built on first use)."""
    return Scanner(LEXICONS[language])

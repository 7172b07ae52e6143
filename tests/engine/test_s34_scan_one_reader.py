"""One reading of quotes, comments and brackets (dllm_lsp/code_scan.py) for the engine's span ends
and post-processing's bracket rules.

Each had a scanner of its own (a regex in engine/span_ends.py, a character loop in
postprocess.py); both now read through code_scan.Scanner, and what they read differently is the
lexicon each gives it (which delimiters, what a backslash escapes, whether a string spans lines,
Lua's long-bracket levels) and the named rule for a `'`. The scanner's parameters are checked
here on their own, then the two readers on the cases where they differ and where they agree,
and the layering: the engine reads code without loading the pipeline's modules.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from dllm_lsp import code_scan, postprocess
from dllm_lsp.code_scan import (ANY_ESCAPES, LINE_ESCAPES, Delimited, Lexicon, Scanner, char_literal,
                                digit_separator, rust_char_or_lifetime)
from dllm_lsp.engine import span_ends
from dllm_lsp.engine.span_ends import SpanEnds
from dllm_lsp.engine.types import InfillRequest


def kinds(lexicon: Lexicon, text: str) -> list[tuple[str, str, bool, str]]:
    """(kind, opener, closed, the token's text) of each token."""
    return [(t.kind, t.opener, t.closed, text[t.start:t.end]) for t in Scanner(lexicon).tokens(text)]


def test_escapes_of_its_line_or_of_anything():
    text = '"a\\\nb" ('
    line = Lexicon(strings=(Delimited("string", '"', '"', False, LINE_ESCAPES),))
    every = Lexicon(strings=(Delimited("string", '"', '"', False, ANY_ESCAPES),))
    # A backslash before the line break escapes nothing: the string ends with its line, and the
    # second line's `"` opens another, which swallows the `(`.
    assert kinds(line, text) == [("string", '"', False, '"a\\'), ("string", '"', False, '" (')]
    assert kinds(every, text) == [("string", '"', True, '"a\\\nb"'), ("bracket", "(", True, "(")]
    assert kinds(line, '"a\\"b" (') == [("string", '"', True, '"a\\"b"'), ("bracket", "(", True, "(")]


def test_long_brackets_close_only_at_their_own_level():
    long = Lexicon(strings=(Delimited("string", "[[", "]]", True, levels=True),))
    assert kinds(long, "[==[ ]] ( ]==] (") == [("string", "[[", True, "[==[ ]] ( ]==]"), ("bracket", "(", True, "(")]
    assert kinds(long, "[=[ ( ]==]") == [("string", "[[", False, "[=[ ( ]==]")]
    flat = Lexicon(strings=(Delimited("string", "[[", "]]", True),))
    assert kinds(flat, "[=[ ]=]") == [("bracket", "[", True, "[")] * 2 + [("bracket", "]", True, "]")] * 2


def test_block_comments_come_before_line_comments():
    lua = Lexicon(block_comments=(Delimited("comment", "--[[", "]]", True),), line_comments=("--",))
    assert kinds(lua, "--[[ ( ]] (-- )\n)") == [("comment", "--[[", True, "--[[ ( ]]"), ("bracket", "(", True, "("),
                                                ("line", "--", True, "-- )"), ("bracket", ")", True, ")")]


def test_a_one_line_string_left_open_ends_before_its_line_break():
    lexicon = Lexicon(strings=(Delimited("string", "'", "'", False),))
    (token, bracket) = Scanner(lexicon).tokens("'ab\n(")
    assert (token.closed, token.end, bracket.start) == (False, 3, 4)


@pytest.mark.parametrize("rule, text, read", [
    # a `'` the rule does not take is the strings' (here a one-line `'` string) ...
    (digit_separator, "1'000 ('", ["char", "bracket", "string"]),
    (digit_separator, "x = '(' (", ["string", "bracket"]),
    (rust_char_or_lifetime, "&'a (')' (", ["char", "bracket", "char", "bracket"]),
    (rust_char_or_lifetime, "= 'ab (", ["string"]),
    (char_literal, "'(' 'ab (", ["char", "string"]),
])
def test_an_apostrophe_rule_leaves_the_rest_to_the_strings(rule, text, read):
    lexicon = Lexicon(apostrophe=rule, strings=(Delimited("string", "'", "'", False, LINE_ESCAPES),))
    assert [t.kind for t in Scanner(lexicon).tokens(text)] == read


def test_without_a_string_a_bare_apostrophe_opens_nothing():
    lexicon = Lexicon(apostrophe=char_literal)
    assert [(t.kind, t.start) for t in Scanner(lexicon).tokens("'a (x')")] == [("bracket", 3), ("bracket", 6)]


def test_a_lexicon_that_reads_nothing_yields_nothing():
    # An empty alternation would match the empty string everywhere (and never move on).
    assert list(Scanner(Lexicon(brackets="")).tokens("(a 'b' // c)")) == []


def test_angles_are_brackets_when_asked_for():
    assert [t.opener for t in Scanner(Lexicon(brackets="()<>")).tokens("Map<K, f(v)>")] == ["<", "(", ")", ">"]


# -- the two readers ---------------------------------------------------------------------------------

def ends(before: str, span: str, after: str, language: str) -> bool:
    return SpanEnds.for_request(InfillRequest.single(before, after, 8, False, language)).allows(0, span)


def test_both_readers_read_through_the_shared_scanner():
    assert isinstance(span_ends._scanner("rust"), code_scan.Scanner)
    assert isinstance(postprocess._scanner("rust", True, True, False), code_scan.Scanner)


@pytest.mark.parametrize("language, code, opened", [
    ("rust", "f(')'", "("),                  # a char literal's bracket is no bracket
    ("rust", "g(&'a x", "("),                # nor is a lifetime a quote
    ("c", "f('{'", "("),
    ("python", "f(\"(\"", "("),
    ("javascript", "f(`)`", "("),
])
def test_where_their_lexicons_agree_they_read_alike(language, code, opened):
    assert not ends("    ", code, "\n", language) and ends("    ", code + ")", "\n", language)
    brackets = postprocess._brackets(code, language)
    assert brackets.open == (opened,) and brackets.quote is None
    assert postprocess._brackets(code + ")", language).unbalanced == 0


def test_where_they_differ_each_keeps_its_reading():
    # A template literal goes on over lines for the span ends; post-processing reads one line at
    # a time, where a string ends with its line.
    assert ends("x = ", "`a\n(", "`;\n", "javascript")
    assert postprocess._brackets("`a\n(", "javascript").open == ("(",)
    # C++'s digit separator: post-processing's rule reads it as code and a lone `'` opens a char
    # literal (read as a string); for the span ends only a whole char literal is one.
    assert postprocess._brackets("'a (", "cpp").quote == "'"
    assert not ends("x = ", "'a (", ";\n", "cpp")
    # Lua's long brackets: levels for post-processing's line reading, `[[` alone for the span ends.
    assert postprocess._line_code("s = [=[ ( ]=]", "lua") == ([], None, -1)
    assert not ends("s = ", "[=[ ( ]=]", "\n", "lua")


def test_the_engine_reads_code_without_the_pipeline():
    code = ("import sys, dllm_lsp.engine.span_ends\n"
            "print(sorted(m for m in sys.modules if m.startswith(('dllm_lsp', 'tree_sitter'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'dllm_lsp.code_scan'" in loaded
    for module in ("dllm_lsp.postprocess", "dllm_lsp.pipeline", "dllm_lsp.planner", "dllm_lsp.syntax", "tree_sitter"):
        assert f"'{module}" not in loaded, loaded

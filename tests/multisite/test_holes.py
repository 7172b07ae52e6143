"""Finding holes and settling the model's fills, without a model (texts given directly)."""
from __future__ import annotations

import pytest

from dllm_lsp.multisite.holes import find_holes
from dllm_lsp.multisite.sites import Site, apply_outcomes, joint_request, settle
from dllm_lsp.syntax.snapshot import Snapshot

from .samples import HOLE_TEXTS, HOLES

# A fill that parses in place of a statement, per language.
GOOD_BODY = {"python": "return width * height", "typescript": "return width * height;", "rust": "width * height"}


@pytest.mark.parametrize("language", sorted(HOLES))
def test_whole_file_holes_are_found_in_order(language):
    text = HOLES[language]
    scope = find_holes(Snapshot.parse(text, language), 0, 0)
    assert [text[h.start:h.end] for h in scope.holes] == HOLE_TEXTS[language]
    assert (scope.start, scope.end) == (0, len(text))


def test_cursor_in_a_function_limits_the_scope_to_it():
    text = HOLES["python"]
    cursor = text.index("def sides") + 4
    scope = find_holes(Snapshot.parse(text, "python"), cursor, cursor)
    assert [text[h.start:h.end] for h in scope.holes] == ["# TODO: count the sides", "raise NotImplementedError(\"sides\")"]
    assert text[scope.start:scope.end].startswith("def sides")


def test_selection_limits_the_holes_to_it():
    text = HOLES["rust"]
    start = text.index("fn main")
    scope = find_holes(Snapshot.parse(text, "rust"), start, len(text))
    assert [text[h.start:h.end] for h in scope.holes] == ["// TODO print the area", "unimplemented!()"]
    inline = scope.holes[1]
    assert inline.single_line and not scope.holes[0].single_line


def test_custom_marker():
    text = "def f():\n    return FILLME\n"
    scope = find_holes(Snapshot.parse(text, "python"), 0, 0, marker="FILLME")
    assert [text[h.start:h.end] for h in scope.holes] == ["FILLME"]
    assert find_holes(Snapshot.parse(text, "python"), 0, 0).holes == []
    with pytest.raises(ValueError, match="marker"):
        find_holes(Snapshot.parse(text, "python"), 0, 0, marker="  ")


@pytest.mark.parametrize("language", sorted(HOLES))
def test_good_fill_is_taken_and_broken_fill_is_kept(language):
    text = HOLES[language]
    holes = find_holes(Snapshot.parse(text, language), 0, 0).holes
    fills = [GOOD_BODY[language] if i == 0 else "(((" for i in range(len(holes))]
    outcomes = settle(text, language, holes, fills)
    assert [o.source for o in outcomes] == ["model"] + ["kept"] * (len(holes) - 1)
    assert all(o.reason for o in outcomes[1:])
    filled = apply_outcomes(text, outcomes)
    assert GOOD_BODY[language] in filled
    assert Snapshot.parse(filled, language).error_count() == 0


def test_fill_that_leaves_its_block_is_kept():
    text = "def f():\n    pass\n\nx = 1\n"
    hole = find_holes(Snapshot.parse(text, "python"), 0, 0).holes
    # parses, but the dedented second line would move code out of f's body
    outcomes = settle(text, "python", hole, ["y = 2\nz = 3"])
    assert outcomes[0].source == "model" and outcomes[0].new_text == "y = 2\n    z = 3"   # re-indented
    site = Site(text.index("pass"), text.index("pass") + 4, "hole", False, 8, indent="",
                owner_type="block", owner_start=text.index("pass"))
    outcomes = settle(text, "python", [site], ["y = 2\nz = 3"])
    assert outcomes[0].source == "kept" and "leaves" in outcomes[0].reason


def test_empty_fill_keeps_the_placeholder():
    text = HOLES["typescript"]
    holes = find_holes(Snapshot.parse(text, "typescript"), 0, 0).holes
    outcomes = settle(text, "typescript", holes, ["", "   "])
    assert all(o.source == "kept" for o in outcomes)
    assert apply_outcomes(text, outcomes) == text


def test_joint_request_masks_every_hole():
    text = HOLES["rust"]
    holes = find_holes(Snapshot.parse(text, "rust"), 0, 0).holes
    request = joint_request(text, holes)
    assert len(request.slots) == len(holes)
    assert "".join(request.pieces) == "".join(
        text[a:b] for a, b in zip([0] + [h.end for h in holes], [h.start for h in holes] + [len(text)])
    )
    with pytest.raises(ValueError, match="overlap"):
        joint_request(text, [holes[0], holes[0]])


def test_settle_wants_one_text_per_site():
    text = HOLES["python"]
    holes = find_holes(Snapshot.parse(text, "python"), 0, 0).holes
    with pytest.raises(ValueError, match="slot texts"):
        settle(text, "python", holes, ["x"])


def test_language_without_grammar_has_no_holes():
    assert find_holes(Snapshot.parse("TODO: write\n", "plaintext"), 0, 0).holes == []


def test_comment_hole_before_a_statement_hole_both_fill():
    # tree-sitter leaves a block's leading comment outside the block; once it is filled with
    # code the block starts earlier, which must not count as the second fill leaving it
    text = "def f():\n    # TODO: a\n    pass\n"
    holes = find_holes(Snapshot.parse(text, "python"), 0, 0).holes
    assert [text[h.start:h.end] for h in holes] == ["# TODO: a", "pass"]
    outcomes = settle(text, "python", holes, ["x = 1", "return x"])
    assert [o.source for o in outcomes] == ["model", "model"]
    assert apply_outcomes(text, outcomes) == "def f():\n    x = 1\n    return x\n"


def test_fill_that_closes_the_block_early_is_kept():
    text = "fn f() {\n    todo!()\n}\n"
    holes = find_holes(Snapshot.parse(text, "rust"), 0, 0).holes
    outcomes = settle(text, "rust", holes, ["1 }\nfn g() { 2"])
    assert outcomes[0].source == "kept" and "leaves" in outcomes[0].reason


@pytest.mark.parametrize("language, text, expected", [
    ("typescript", ('function f(): number {\n  throw new Error("not implemented");\n}\n'
                    'function g() { throw new Error("bad input"); }\nconst s = "TODO";\n'),
     ['throw new Error("not implemented");']),
    ("javascript", 'function f() {\n  throw new Error("Not yet implemented: f");\n}\n',
     ['throw new Error("Not yet implemented: f");']),
    ("go", 'package main\n\nfunc f() int {\n\tpanic("TODO")\n}\n\nfunc g() { panic(err) }\n', ['panic("TODO")']),
])
def test_placeholder_throws_and_panics(language, text, expected):
    # a real error (`bad input`, `panic(err)`) and a string that merely says TODO are no holes
    holes = find_holes(Snapshot.parse(text, language), 0, 0).holes
    assert [text[h.start:h.end] for h in holes] == expected
    assert not holes[0].single_line


def test_healed_pieces_leave_the_blanks_before_each_hole_to_the_model():
    """Token healing in a joint fill: each piece ends before the blanks on its hole's line; the
    model's text for a hole then starts with them, and settling gives the same outcome as the
    same text without them."""
    text = HOLES["rust"]
    holes = find_holes(Snapshot.parse(text, "rust"), 0, 0).holes
    healed = joint_request(text, holes, heal_blanks=True)
    plain = joint_request(text, holes)
    assert [p.rstrip(" \t") for p in plain.pieces[:-1]] == healed.pieces[:-1]
    assert healed.pieces[-1] == plain.pieces[-1]
    assert any(p != h for p, h in zip(plain.pieces, healed.pieces))      # some hole follows blanks
    fills = ["1" for _ in holes]
    before = [text[text.rfind("\n", 0, h.start) + 1:h.start] for h in holes]     # each hole's line, up to it
    blanks = [b[len(b.rstrip(" \t")):] for b in before]
    assert settle(text, "rust", holes, [b + f for b, f in zip(blanks, fills)]) == settle(text, "rust", holes, fills)
    assert not any(slot.heal_before for slot in healed.slots)
    assert all(slot.heal_before for slot in joint_request(text, holes, heal_before=True).slots)


def test_a_crlf_file_gets_a_crlf_fill():
    text = "def f():\r\n    pass\r\n\r\nx = 1\r\n"
    hole = find_holes(Snapshot.parse(text, "python"), 0, 0).holes
    outcomes = settle(text, "python", hole, ["y = 2\nz = 3"])
    assert outcomes[0].source == "model" and outcomes[0].new_text == "y = 2\r\n    z = 3"
    assert "\n" not in apply_outcomes(text, outcomes).replace("\r\n", "")


@pytest.mark.parametrize("language, text", [
    ("python", "def f(x):\r\n    # TODO\r\n"),
    ("c", "int f(void) {\r\n  // TODO\r\n}\r\n"),
    ("rust", "fn f() {\r\n    // TODO\r\n}\r\n"),
    ("go", "package m\r\n\r\nfunc f() {\r\n\t// TODO\r\n}\r\n"),
    ("java", "class A {\r\n  void f() {\r\n    // TODO\r\n  }\r\n}\r\n"),
])
def test_a_todo_comment_hole_in_a_crlf_file_ends_before_the_line_end(language, text):
    """Those grammars' line comments take a CRLF's `\\r`: the hole ran into the line end, and a
    filled `# TODO` left a bare `\\n` behind."""
    holes = find_holes(Snapshot.parse(text, language), 0, 0).holes
    assert holes and all(text[h.end:h.end + 2] == "\r\n" for h in holes), [(h.start, h.end) for h in holes]
    filled = apply_outcomes(text, settle(text, language, holes, ["x = 1" for _ in holes]))
    assert "\n" not in filled.replace("\r\n", "")


def test_a_file_with_lone_carriage_returns_has_the_same_holes_as_with_line_feeds():
    """Classic Mac line ends: the finder looked for lines at `\\n`, so a `# TODO` alone on its line
    was no hole and `pass` became a one-line hole with no indentation."""
    text = "def f(x):\n    # TODO\n    pass\n"
    lf = find_holes(Snapshot.parse(text, "python"), 0, 0).holes
    cr = find_holes(Snapshot.parse(text.replace("\n", "\r"), "python"), 0, 0).holes
    assert [(h.start, h.end, h.single_line, h.indent) for h in cr] == \
        [(h.start, h.end, h.single_line, h.indent) for h in lf] == [(14, 20, False, "    "), (25, 29, False, "    ")]


LICENSE_C = ("/*\n * Copyright (c) 2024 Example Corp.\n * Licensed under the MIT license.\n"
             " * TODO: move the helpers to a shared header.\n */\n#include <stdio.h>\n\n"
             "int main(void) {\n    printf(\"hi\\n\");\n    return 0;\n}\n")


@pytest.mark.parametrize("language, text", [
    # a license block that mentions a to-do somewhere was one hole, offered from every cursor
    ("c", LICENSE_C),
    # inner block doc comments (Rust; Doxygen and Qt in C/C++) are documentation
    ("rust", "/*! Geometry helpers. TODO: document the units. */\nfn area(w: u32, h: u32) -> u32 {\n    w * h\n}\n"),
    ("cpp", "/*! \\brief Area. TODO: units */\nint area(int w, int h) { return w * h; }\n"),
    # a to-do app's TODO state, where it is defined and where it is used
    ("python", "from enum import Enum\n\n\nclass State(Enum):\n    TODO = 1\n    DONE = 2\n\n\n"
               "def is_open(task):\n    return task.state == State.TODO\n"),
    ("python", "from states import TODO\n\n\ndef is_open(task):\n    return task.state == TODO\n"),
    ("java", "enum State { TODO, DONE }\nclass A { boolean f(State s) { return s == State.TODO; } }\n"),
    ("typescript", "enum State { TODO, DONE }\nconst open = (s: State) => s === State.TODO;\n"),
    ("c", "enum state { TODO, DONE };\nint is_open(int s) { return s == TODO; }\n"),
    ("rust", "enum State { TODO, Done }\nfn f(s: State) -> bool { matches!(s, State::TODO) }\n"),
])
def test_documentation_and_names_spelled_like_the_marker_are_no_holes(language, text):
    assert find_holes(Snapshot.parse(text, language), 0, len(text)).holes == []


@pytest.mark.parametrize("language, text, expected", [
    ("c", "int f(void) {\n    /*\n     * TODO: handle errors\n     */\n    return 0;\n}\n",
     "/*\n     * TODO: handle errors\n     */"),
    ("c", "int f(void) {\n    /* the fast path. TODO */\n    return 0;\n}\n", "/* the fast path. TODO */"),
    ("python", "def f():\n    return TODO\n", "TODO"),
])
def test_a_block_that_is_the_note_and_a_bare_marker_token_still_are_holes(language, text, expected):
    holes = find_holes(Snapshot.parse(text, language), 0, len(text)).holes
    assert [text[h.start:h.end] for h in holes] == [expected]

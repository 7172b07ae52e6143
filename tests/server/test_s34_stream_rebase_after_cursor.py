"""rebase for a completion whose range ends after the cursor (the blank of `function f() {‸ }`
that a body replaces, SpanPlan.after_cursor): typed through at the cursor, moved by edits before
it, kept by edits after its end, and dropped by anything that touches the blanks it replaces."""
import random

import pytest

from dllm_lsp.rebase import Placement, rebase

OLD = "let a = 1;\nfunction f() { }\nf();\n"
CURSOR = OLD.index("{ }") + 1
END = CURSOR + 1                      # the blank before the `}`
BODY = "\n  return 1;\n"


def edited(text: str, at: int, remove: int, insert: str) -> str:
    return text[:at] + insert + text[at + remove:]


@pytest.mark.parametrize("typed", ["\n", "\n  ", "\n  ret"])
def test_typing_the_body_at_the_cursor_is_typing_through_it(typed):
    new = edited(OLD, CURSOR, 0, typed)
    assert rebase(BODY, CURSOR, END, OLD, new, after_cursor=1) == \
        Placement(BODY, CURSOR, END + len(typed), typed_through=len(typed))
    # the text it makes is the one it made before
    moved = rebase(BODY, CURSOR, END, OLD, new, after_cursor=1)
    assert new[:moved.start] + BODY + new[moved.end:] == OLD[:CURSOR] + BODY + OLD[END:]


def test_typing_it_through_twice_goes_on_from_the_moved_range():
    once = edited(OLD, CURSOR, 0, "\n")
    twice = edited(once, CURSOR + 1, 0, "  r")
    assert rebase(BODY, CURSOR, END + 1, once, twice, after_cursor=1) == \
        Placement(BODY, CURSOR, END + 4, typed_through=3)


@pytest.mark.parametrize("typed", ["x", " ", "\n\n", "\n    "])
def test_typing_something_else_at_the_cursor_drops_it(typed):
    assert rebase(BODY, CURSOR, END, OLD, edited(OLD, CURSOR, 0, typed), after_cursor=1) is None


def test_typing_all_of_it_uses_it_up():
    assert rebase(BODY, CURSOR, END, OLD, edited(OLD, CURSOR, 0, BODY), after_cursor=1) is None


@pytest.mark.parametrize("at,remove,insert", [(CURSOR, 1, ""), (CURSOR, 1, "\t"), (CURSOR - 1, 3, "")])
def test_an_edit_of_the_blank_it_replaces_drops_it(at, remove, insert):
    assert rebase(BODY, CURSOR, END, OLD, edited(OLD, at, remove, insert), after_cursor=1) is None


def test_edits_before_it_move_it_and_after_it_keep_it():
    above = edited(OLD, 0, 0, "// c\n")
    assert rebase(BODY, CURSOR, END, OLD, above, after_cursor=1) == Placement(BODY, CURSOR + 5, END + 5)
    below = edited(OLD, OLD.index("f();"), 0, "g();\n")
    assert rebase(BODY, CURSOR, END, OLD, below, after_cursor=1) == Placement(BODY, CURSOR, END)
    deleted_closer = edited(OLD, END, 1, "")
    assert rebase(BODY, CURSOR, END, OLD, deleted_closer, after_cursor=1) == Placement(BODY, CURSOR, END)


def test_a_blank_typed_at_the_cursor_with_an_edit_further_on_drops_it():
    """One didChange, two cursors: the diff reads it as one change from the end of the blanks (the
    typed blank is the same character), which is not after the completion."""
    new = edited(edited(OLD, OLD.index("f();"), 0, " "), CURSOR, 0, " ")
    assert rebase(BODY, CURSOR, END, OLD, new, after_cursor=1) is None


def placements(old: str, new: str) -> list[tuple[int, int, str]]:
    """Every single pure insertion or deletion (at, removed, inserted) that turns `old` into `new`."""
    if len(new) > len(old):
        n = len(new) - len(old)
        return [(q, 0, new[q:q + n]) for q in range(len(old) + 1) if old[:q] + new[q:q + n] + old[q:] == new]
    n = len(old) - len(new)
    return [(q, n, "") for q in range(len(new) + 1) if old[:q] + old[q + n:] == new]


def fits(result: Placement, text: str, old: str, start: int, cursor: int, end: int,
         at: int, removed: int, inserted: str) -> bool:
    """Whether `result` is what the edit (at, removed, inserted) makes of a completion over
    [start, end) of `old` with the cursor at `cursor`: exactly, nothing else."""
    delta = len(inserted) - removed
    if at + removed < start:                                   # before it: moved
        return result == Placement(text, start + delta, end + delta)
    if at > end or (at == end and (removed or end > cursor)):  # after it: kept
        return result == Placement(text, start, end)
    if at == cursor and inserted and text.startswith(old[start:cursor] + inserted):
        return result == Placement(text, start, end + len(inserted), typed_through=len(inserted))
    return False


@pytest.mark.parametrize("seed", range(3))
def test_a_result_kept_fits_one_place_the_edit_may_have_been_made(seed):
    """In text that repeats a diff cannot tell where an edit was made; a result that is not
    dropped must be exactly right for at least one of the places."""
    rng = random.Random(seed)
    kept = 0
    for _ in range(20000):
        old = "".join(rng.choice("a \n") for _ in range(rng.randint(2, 9)))
        start = rng.randint(0, len(old) - 1)
        cursor = rng.randint(start, len(old) - 1)
        end = rng.randint(cursor + 1, len(old))               # at least one character after the cursor
        text = old[start:cursor] + "".join(rng.choice("a \n") for _ in range(rng.randint(1, 4)))
        at = rng.randint(0, len(old))
        if rng.random() < 0.5:
            new = old[:at] + "".join(rng.choice("a \n") for _ in range(rng.randint(1, 3))) + old[at:]
        else:
            new = old[:at] + old[at + rng.randint(1, 3):]
        if new == old:
            continue
        result = rebase(text, start, end, old, new, after_cursor=end - cursor)
        if result is not None:
            kept += 1
            assert any(fits(result, text, old, start, cursor, end, *p) for p in placements(old, new)), \
                (old, start, cursor, end, text, new, result)
    assert kept > 1000        # (most edits lie before or after the range)

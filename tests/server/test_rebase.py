"""Moving a completion onto a newer version of its document, only where that is exact."""
import random

import pytest

from dllm_lsp.rebase import Placement, rebase

OLD = "def area(w, h):\n    return wi\n\nprint(1)\n"
CURSOR = OLD.index("wi") + 2
START = CURSOR - 2        # "wi" already typed: the completion replaces it with "width * height"


def edited(text: str, at: int, remove: int, insert: str) -> str:
    return text[:at] + insert + text[at + remove:]


def test_unchanged_text_keeps_the_completion():
    assert rebase("width * h", START, CURSOR, OLD, OLD) == Placement("width * h", START, CURSOR)


def test_edits_after_it_keep_it_in_place():
    new = edited(OLD, OLD.index("1)"), 1, "22")
    assert rebase("width * h", START, CURSOR, OLD, new) == Placement("width * h", START, CURSOR)


def test_edits_before_it_move_it():
    new = edited(OLD, 4, 4, "surface")      # area -> surface: 3 more characters before
    assert rebase("width * h", START, CURSOR, OLD, new) == Placement("width * h", START + 3, CURSOR + 3)


def test_typing_through_the_suggestion_keeps_it_over_the_longer_word():
    new = edited(OLD, CURSOR, 0, "dt")      # "wi" -> "widt": the suggestion goes on with "dt"
    assert rebase("width * h", START, CURSOR, OLD, new) == Placement("width * h", START, CURSOR + 2, typed_through=2)


def test_typing_something_else_drops_it():
    new = edited(OLD, CURSOR, 0, "x")
    assert rebase("width * h", START, CURSOR, OLD, new) is None


def test_typing_all_of_it_uses_it_up():
    new = edited(OLD, CURSOR, 0, "dth * h")
    assert rebase("width * h", START, CURSOR, OLD, new) is None


@pytest.mark.parametrize("at,remove,insert", [(START, 1, "W"), (CURSOR - 1, 1, ""), (START - 1, 2, "")])
def test_an_edit_inside_the_typed_part_drops_it(at, remove, insert):
    assert rebase("width * h", START, CURSOR, OLD, edited(OLD, at, remove, insert)) is None


def test_a_deletion_right_after_the_cursor_keeps_it():
    new = edited(OLD, CURSOR, 1, "")        # the newline after the cursor joined the next line
    assert rebase("width * h", START, CURSOR, OLD, new) == Placement("width * h", START, CURSOR)


# Enter and the indentation typed at the end of a header whose next line starts with that same
# indentation: the diff alone would put the insertion after the cursor (the common prefix runs on
# through the next line's indent), which kept the suggestion at the old cursor.
HEADER = "def f(xs):\n    for x in xs:\n        pass\n"
AFTER_COLON = HEADER.index(":\n        pass") + 1


def test_typing_through_a_repeating_insertion_is_typing_at_the_cursor():
    new = edited(HEADER, AFTER_COLON, 0, "\n        ")
    assert rebase("\n        print(x)", AFTER_COLON, AFTER_COLON, HEADER, new) == \
        Placement("\n        print(x)", AFTER_COLON, AFTER_COLON + 9, typed_through=9)


def test_a_repeating_insertion_at_the_cursor_that_departs_from_the_suggestion_drops_it():
    new = edited(HEADER, AFTER_COLON, 0, "\n    ")      # the user went to the next line, the suggestion
    assert rebase("  # each x", AFTER_COLON, AFTER_COLON, HEADER, new) is None   # was for this one


def test_an_insertion_that_only_fits_after_the_cursor_keeps_it_in_place():
    at = HEADER.index("pass")
    new = edited(HEADER, at, 0, "# ")
    assert rebase("\n        print(x)", AFTER_COLON, AFTER_COLON, HEADER, new) == \
        Placement("\n        print(x)", AFTER_COLON, AFTER_COLON)


def test_a_backspace_the_diff_reads_as_a_deletion_after_the_cursor_drops_it():
    """`name = '‸'` and the first quote deleted: the text is the same as with the second one
    deleted, which would keep the suggestion in place, one character right of the user's cursor."""
    old = "name = ''\n"
    cursor = old.index("''") + 1
    new = edited(old, cursor - 1, 1, "")
    assert rebase("bob", cursor, cursor, old, new) is None
    assert rebase("bob", cursor, cursor, old, edited(old, cursor + 1, 1, "")) == Placement("bob", cursor, cursor)


def test_an_edit_the_diff_cannot_place_but_that_lies_before_it_either_way_moves_it():
    old = "x = 11\ny = \n"
    cursor = len("x = 11\ny = ")
    new = edited(old, 4, 1, "")                        # one of the two 1s: either way before the cursor
    assert rebase("2", cursor, cursor, old, new) == Placement("2", cursor - 1, cursor - 1)


RETURN = "def f(x):\n    return \n"
AT = RETURN.index("return ") + len("return ")


@pytest.mark.parametrize("new", [
    edited(RETURN, AT - 1, 1, ""),                         # Backspace over the blank: `returnnp.dtype(x)`
    edited(RETURN, AT - len("return "), len("return "), "yield"),   # the word before replaced
    edited(RETURN, AT - 2, 2, ""),                         # two characters up to the cursor
    "x = 1\n",                                             # closed and reopened as another file
])
def test_an_edit_that_ends_right_at_the_cursor_drops_it(new):
    """The completion continues the text before the cursor; an edit that ends there changed that
    text, and moving the completion with it glued it onto whatever is there now."""
    assert rebase("np.dtype(x)", AT, AT, RETURN, new) is None


def test_an_edit_ending_a_character_before_the_cursor_still_moves_it():
    new = edited(RETURN, AT - 2, 1, "")                    # `retur ` : the blank before the cursor kept
    assert rebase("x", AT, AT, RETURN, new) == Placement("x", AT - 1, AT - 1)


def placements(old: str, new: str) -> list[tuple[int, int, str]]:
    """Every single edit (at, removed, inserted) that is a pure insertion or deletion turning
    `old` into `new`: in text that repeats there are several."""
    if len(new) > len(old):
        n = len(new) - len(old)
        return [(q, 0, new[q:q + n]) for q in range(len(old) + 1) if old[:q] + new[q:q + n] + old[q:] == new]
    n = len(old) - len(new)
    return [(q, n, "") for q in range(len(new) + 1) if old[:q] + old[q + n:] == new]


def fits(result: Placement, text: str, cursor: int, at: int, removed: int, inserted: str) -> bool:
    """Whether `result` is what the edit (at, removed, inserted) makes of a completion at `cursor`."""
    if at + removed < cursor:                                   # before it: moved
        return result == Placement(text, cursor + len(inserted) - removed, cursor + len(inserted) - removed)
    if at > cursor or (at == cursor and removed):              # after it: kept
        return result == Placement(text, cursor, cursor)
    if at == cursor and inserted:                               # typed at it: through the suggestion, or after it
        return result in (Placement(text, cursor, cursor),
                          Placement(text, cursor, cursor + len(inserted), typed_through=len(inserted)))
    return False


@pytest.mark.parametrize("seed", range(3))
def test_a_result_kept_after_an_insertion_or_deletion_fits_one_place_it_may_have_been_made(seed):
    """In text that repeats a diff cannot tell where an edit was made; a result that is not dropped
    must be right for at least one of the places. An insertion the diff puts after the cursor was
    taken as typed at it even where no such place lay before it (`local s = [[`: `llocal` read as
    a `[` typed through the suggestion)."""
    rng = random.Random(seed)
    for _ in range(20000):
        old = "".join(rng.choice("ab\n") for _ in range(rng.randint(1, 8)))
        cursor = rng.randint(0, len(old))
        text = "".join(rng.choice("ab\n") for _ in range(rng.randint(1, 4)))
        at = rng.randint(0, len(old))
        if rng.random() < 0.5:
            new = old[:at] + "".join(rng.choice("ab\n") for _ in range(rng.randint(1, 3))) + old[at:]
        else:
            new = old[:at] + old[at + rng.randint(1, 3):]
        if new == old:
            continue
        result = rebase(text, cursor, cursor, old, new)
        if result is not None:
            assert any(fits(result, text, cursor, *p) for p in placements(old, new)), (old, cursor, text, new, result)

"""Moving a completion onto a newer version of its document, only where that is exact."""
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

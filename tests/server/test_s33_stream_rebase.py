"""rebase at the edge the streamed reports and the answers share: a change that begins at the
cursor keeps the completion in place only when it deletes (the Delete key); one that writes
there was typed there, and the user's cursor is past it."""
from dllm_lsp.rebase import Placement, rebase

OLD = "def f():\n    return \n\nx = 1\n"
CURSOR = OLD.index("return ") + 7


def test_typing_at_the_cursor_with_an_edit_further_down_drops_the_completion():
    # two cursors typed `~` (one didChange): the diff is one replacement from the cursor to `x`,
    # which kept the completion at the old cursor, before the `~` just typed
    new = OLD[:CURSOR] + "~" + OLD[CURSOR:].replace("x = 1", "~x = 1")
    assert rebase("abc", CURSOR, CURSOR, OLD, new) is None


def test_typing_through_with_an_edit_further_down_is_not_typing_through():
    new = OLD[:CURSOR] + "a" + OLD[CURSOR:].replace("x = 1", "y = 2")
    assert rebase("abc", CURSOR, CURSOR, OLD, new) is None


def test_overtyping_the_text_after_the_cursor_drops_the_completion():
    old = "    return foo\n"
    assert rebase("bar", 11, 11, old, "    return zoo\n") is None


def test_a_deletion_at_the_cursor_or_an_edit_after_it_keeps_it_in_place():
    old = "    return foo\n"
    assert rebase("bar", 11, 11, old, "    return oo\n") == Placement("bar", 11, 11)
    assert rebase("bar", 11, 11, old, "    return fxo\n") == Placement("bar", 11, 11)

"""Moving a completion computed on one version of a document onto a newer version.

A completion replaces [start, end) of the text it was computed on with `text`: the cursor is at
`end - after_cursor`, [start, cursor) is the part of the word already typed, which `text` begins
with, and [cursor, end) the blanks after the cursor it replaces too (`after_cursor` of them: the
`{ | }` body of a line at column 0, planner/shapes.py; none elsewhere). Between
that version and the current one the document may have changed: the user typed on while the
model denoised, or typed the completion's first characters themselves. `rebase` says where the
completion goes now, only when that is exact:

- the edits lie after the replaced range: it stays where it is (a change that begins at its end
  only when it deletes, or, past blanks it replaces, only inserts: one that writes at the cursor
  was typed there, whatever else it changed, and a diff reads a blank typed at the cursor before
  another edit as a change from the end of those blanks);
- they lie before it and end before it: it moves with them (an edit that ends right at it, a
  Backspace before the cursor, changed the text it continues, so it is dropped);
- they insert, right at the cursor, exactly the characters the completion goes on with (the
  user typed through the suggestion): it keeps its text over the longer typed part (and the
  blanks after it, which still follow the cursor), and is used up (None) once every character
  of it has been typed. An insertion that fits at the
  cursor is taken to be there, even where the diff could also put it later (text that repeats
  what follows the cursor) -- only where the cursor lies among the places it may have been made;
- a deletion that the diff places after the cursor but that may as well have been a Backspace
  at it (one of two equal characters): None, as any edit that may touch the completion;
- anything else (an edit inside the range, the blanks after the cursor included, or typing that
  departs from the suggestion): None,
  the completion no longer fits and is dropped rather than shown in the wrong place.
"""
from __future__ import annotations

from dataclasses import dataclass

from .text_compare import common_prefix_length, common_suffix_length


@dataclass(frozen=True)
class Placement:
    text: str       # what replaces [start, end) of the new version
    start: int
    end: int        # the cursor, plus the blanks after it that the completion replaces (after_cursor)
    typed_through: int = 0   # characters of the suggestion the user typed since it was made


def rebase(text: str, start: int, end: int, old: str, new: str, after_cursor: int = 0) -> Placement | None:
    # The cursor, not the range's end, is where the user types: typing through a `{ | }` body
    # inserts before the blanks it replaces (comparing with `end` never saw typing there)
    cursor = end - after_cursor
    if old == new:
        return Placement(text, start, end)
    prefix = common_prefix_length(old, new)
    suffix = common_suffix_length(old, new, min(len(old), len(new)) - prefix)
    old_a, old_b = prefix, len(old) - suffix          # the changed region of the old text
    new_b = len(new) - suffix
    if old_a == old_b or new_b == old_a:
        # A pure insertion or deletion. Inside text that repeats, the diff cannot tell where it was
        # made: Enter and an indent typed before a line that starts with that indent, one of two
        # quotes deleted. It may have been made anywhere from `lowest` to `old_a` (the diff's pick).
        shorter = min(len(old), len(new))
        lowest = shorter - common_suffix_length(old, new, shorter)
        if lowest < old_a:
            if old_a == old_b and lowest <= cursor <= old_a:
                old_a = old_b = cursor                 # it fits at the cursor: editors type there
                new_b = cursor + len(new) - len(old)
            elif not (lowest > end or (lowest == end and (old_b > old_a or end > cursor))) \
                    and not old_b < start:
                return None                            # some of its places touch the completion
    if old_a > end or (old_a == end and (new_b == old_a or (end > cursor and old_b == old_a))):
        # edited after the completion, or a deletion right after the cursor (Delete): the cursor
        # stays. A change at the cursor that writes something is not after it: typed there (with
        # another edit further on, which makes the diff one replacement), the user's cursor is
        # past what was typed, and the completion kept at the old cursor was shown before it.
        # Past the blanks a `{ | }` body replaces, a pure insertion the diff places only there
        # (it did not fit at the cursor, above) was not typed at the cursor either; a replacement
        # that begins there may be a blank typed at the cursor, the rest of it an edit further on
        return Placement(text, start, end)
    if old_b < start:
        # strictly before: a deletion or replacement that ends at `start` changed the text the
        # completion goes on from (Backspace over `return `'s blank: `returnnp.dtype(x)`)
        delta = len(new) - len(old)
        return Placement(text, start + delta, end + delta)
    if old_a == old_b == cursor:                       # a pure insertion right at the cursor
        typed = new[old_a:new_b]
        already = old[start:cursor] + typed
        if text.startswith(already):
            if len(already) >= len(text):
                return None                            # typed to the end: nothing left to suggest
            return Placement(text, start, end + len(typed), typed_through=len(typed))
    return None

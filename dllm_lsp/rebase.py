"""Moving a completion computed on one version of a document onto a newer version.

A completion replaces [start, end) of the text it was computed on with `text` (the cursor is at
`end`; [start, end) is the part of the word already typed, which `text` begins with). Between
that version and the current one the document may have changed: the user typed on while the
model denoised, or typed the completion's first characters themselves. `rebase` says where the
completion goes now, only when that is exact:

- the edits lie after the replaced range: it stays where it is;
- they lie before it: it moves with them;
- they insert, right at the cursor, exactly the characters the completion goes on with (the
  user typed through the suggestion): it keeps its text over the longer typed part, and is
  used up (None) once every character of it has been typed. An insertion that fits at the
  cursor is taken to be there, even where the diff could also put it later (text that repeats
  what follows the cursor);
- anything else (an edit inside the range, or typing that departs from the suggestion): None,
  the completion no longer fits and is dropped rather than shown in the wrong place.
"""
from __future__ import annotations

from dataclasses import dataclass

from .text_compare import common_prefix_length, common_suffix_length


@dataclass(frozen=True)
class Placement:
    text: str       # what replaces [start, end) of the new version
    start: int
    end: int        # the cursor
    typed_through: int = 0   # characters of the suggestion the user typed since it was made


def rebase(text: str, start: int, end: int, old: str, new: str) -> Placement | None:
    if old == new:
        return Placement(text, start, end)
    prefix = common_prefix_length(old, new)
    suffix = common_suffix_length(old, new, min(len(old), len(new)) - prefix)
    old_a, old_b = prefix, len(old) - suffix          # the changed region of the old text
    new_b = len(new) - suffix
    if old_a == old_b > end and len(old) - common_suffix_length(old, new, len(old)) <= end:
        # A pure insertion the diff places after the cursor that fits at the cursor as well: the
        # common prefix runs on through text the insertion repeats (Enter and an indent typed
        # before a line that starts with that indent). Editors type at the cursor, so it goes there.
        old_a = old_b = end
        new_b = end + len(new) - len(old)
    if old_a >= end and (old_a > end or old_b > old_a):
        return Placement(text, start, end)             # edited after the completion (not a typing at it)
    if old_b <= start and (old_b < start or old_a < old_b):
        delta = len(new) - len(old)
        return Placement(text, start + delta, end + delta)
    if old_a == old_b == end:                          # a pure insertion right at the cursor
        typed = new[old_a:new_b]
        already = old[start:end] + typed
        if text.startswith(already):
            if len(already) >= len(text):
                return None                            # typed to the end: nothing left to suggest
            return Placement(text, start, end + len(typed), typed_through=len(typed))
    return None

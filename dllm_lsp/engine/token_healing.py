"""Token healing at the piece before a slot: punctuation the tokenizer would join to what follows.

Each canvas piece is tokenized on its own (as training lays examples out), so a prefix typed up
to `print(` ends in the token `(`. The tokenizer writes `("`, `()`, `([`, `(-` as one token, so
the model has seen `(` before a word but never before `"`, `)`, `[` or `-`: a string argument,
an empty call or a list is out of its reach just after the user typed the bracket. The same goes
for ` =` before `=` (` ==`), ` [` before `]` (` []`), `[` before `:` (`[:`, `[::`), `'` before
`,` or `:` (docs/planner.md, "Punctuation typed last").

So where a slot allows it (`Slot.heal_before`: the planner's `healTyped`), the engine gives the
piece's last token back when it cut one in two: its text is punctuation (no letter, digit,
underscore or line break: words and blanks are the planner's, planner/spans.py), it is what the
piece ends with, and a longer token begins with it and agrees with what the slot must write
after it (`Slot.starts_with`). The piece loses it and the slot starts with it, which the start
gate has the model write first (span_starts.py: `(`, `("` or `()`, as the model likes); the
engine takes it off the slot's text again, so the caller reads text that follows its own piece,
as without healing. A text that lacks it (the gate could not write it) is no text.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from .span_starts import TokenIndex
from .types import InfillRequest, TokenConfidence

# The piece's last line is tokenized to find its last token, at most this many characters of it:
# a tokenizer's pre-tokens do not cross a line break, and the last one is short.
_TAIL_CHARS = 256


def _punctuation(text: str) -> bool:
    """Text the planner does not heal itself: something besides blanks, none of it a word's
    character or a line break (a token cut in a word is the planner's typed word)."""
    return bool(text.strip(" \t")) and not any(ch.isalnum() or ch in "_\n\r" for ch in text)


@dataclass(frozen=True)
class Healing:
    """A request as the canvas lays it out, and per slot the text its piece gave back ("")."""

    request: InfillRequest
    heads: tuple[str, ...]

    @classmethod
    def of(cls, request: InfillRequest, index: Callable[[], TokenIndex],
           encode: Callable[[str], list[int]]) -> "Healing | None":
        """The healed request, or None where no slot gives anything back (`index` is asked only
        where a piece ends in punctuation that may be a token's start)."""
        heads = []
        for piece, slot in zip(request.pieces, request.slots):
            head = ""
            if slot.heal_before and piece and _punctuation(piece[-1]):
                tail = piece[max(piece.rfind("\n"), len(piece) - _TAIL_CHARS, 0):]
                ids = encode(tail)
                tokens = index()
                last = tokens.text(ids[-1]) if ids else ""
                if _punctuation(last) and piece.endswith(last) and tokens.extends(last, slot.starts_with):
                    head = last
            heads.append(head)
        if not any(heads):
            return None
        pieces = [piece[:len(piece) - len(head)] for piece, head in zip(request.pieces, heads)] + request.pieces[len(heads):]
        slots = [replace(slot, starts_with=head + slot.starts_with) for slot, head in zip(request.slots, heads)]
        return cls(InfillRequest(pieces, slots, request.language), tuple(heads))

    def texts(self, slots: list[str]) -> list[str]:
        """One candidate's slot texts as they follow the caller's pieces."""
        return [text[len(head):] if text.startswith(head) else "" for text, head in zip(slots, self.heads)]

    def confidences(self, slots: list[list[TokenConfidence]]) -> list[list[TokenConfidence]]:
        """One candidate's tokens per slot, each end moved back by the head; a token that wrote
        only (part of) the head leaves, as its text is not shown."""
        return [[TokenConfidence(token.end - len(head), token.confidence) for token in tokens
                 if token.end > len(head)] for tokens, head in zip(slots, self.heads)]

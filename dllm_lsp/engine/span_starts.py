"""Where a span must start: with what the user typed before the cursor and the prefix left out.

Mid-word, the planner ends the request's prefix before the word and asks for the whole word
(`return nai|` asks for ` naive`, planner/shapes.py: a tokenizer writes ` naive` as one token,
so a prefix ending in ` nai` would ask the model to go on from a token it saw only as the start
of other words). Post-processing then shows the model's text only if it begins with what was
typed. Left to itself the model rarely does: the shipped CPU preview, on HumanEval's single
lines with their first two characters typed, showed something on a fifth of them (docs/eval.md,
"A word typed halfway"), and most keystrokes inside a word showed nothing. The blanks typed
before the cursor are left out of the prefix the same way (planner/spans.healed_blanks).

This is token healing for what was typed. `Slot.starts_with` holds the text the slot must begin
with (the blanks the prefix left out, then the word typed halfway); while a candidate's slot has
not written it, the loop decides that slot's positions in order: its first undecided position
(the frontier) may only take a token that agrees with what is still to write (a start of it, or
a token that begins with all of it: ` na`, ` nai`, ` naive`), the frontier is committed in that
step whatever its confidence, and unless its token finishes the start, the slot's later positions
wait. A whole-word token settles it in the first step, beside the rest of that step's commits; a
start written in pieces takes a step a piece, past the step budget if need be (the budget's
greedy fill would guess the tokens after it blind). A rest that no token agrees with (a
character the tokenizer splits into bytes) ends the rule for that slot: the model writes it
unaided and post-processing judges, as before. A start that ends in blanks must be finished by a
token with text after them: the user typed the blank to go on writing on that line, and an empty
answer shows nothing. Likewise where the line cannot end after the text before the slot and its
start (an assignment, a comparison, an operator, a dot: `depth +=`, `s.`; `goes_on`), in a slot
the planner made: the position after the start takes no end and no token of blanks alone. Left
free, the shipped model ended `depth +=` with a blank (docs/planner.md, "Punctuation typed last").
The engine may have put punctuation into a start itself (token_healing.py: `(` of `("`).
"""
from __future__ import annotations

import bisect
import math
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from .slot_index import slot_firsts
from .types import InfillRequest

_GOES_ON = frozenset("=.+-*/%<&|^~!@")    # a line does not end after these (goes_on)
_MASKS_KEPT = 64     # agreeing-token masks kept per index: typing asks for the same few again and again


class TokenIndex:
    """Each token's text as it reads inside a sequence, indexed by text for "which tokens agree
    with this string", and which tokens hold a line break. Built once per model (`TokenIndex.of`):
    the engine's one table of what its tokenizer's tokens read as, for every loop."""

    def __init__(self, texts: list[str]) -> None:
        self.size = len(texts)
        # A byte piece (U+FFFD) that holds a line break still breaks the line: counted here.
        self._breaks = [token for token, text in enumerate(texts) if "\n" in text]
        self._line_breaks: dict[str, torch.Tensor] = {}    # device -> the `line_breaks` mask
        by_text: dict[str, list[int]] = defaultdict(list)
        self._text_of: dict[int, str] = {}
        for token, text in enumerate(texts):
            # Empty: special tokens, and pieces that decode to nothing; U+FFFD: a piece of a
            # character's bytes, which agrees with no text on its own.
            if text and "\ufffd" not in text:
                by_text[text].append(token)
                self._text_of[token] = text
        self._by_text = dict(by_text)
        self._sorted = sorted(self._by_text)
        # (rest, device, beyond) -> (the mask on that device, the smallest agreeing id or `size`)
        self._masks: OrderedDict[tuple[str, str, bool], tuple[torch.Tensor, int]] = OrderedDict()
        self._going_on: dict[str, torch.Tensor] = {}      # device -> the `going_on` mask

    @classmethod
    def of(cls, tokenizer: Tokenizer, exclude: tuple[int, ...] = ()) -> "TokenIndex":
        """The index of `tokenizer`'s tokens. Each token is decoded after a plain
        one and that one's text taken off: a tokenizer that drops a word's leading space at the
        start of a text (SentencePiece's `▁`) keeps it there. Special tokens (the tokenizer's
        and `exclude`, the model's mask and ends) agree with nothing."""
        n = tokenizer.get_vocab_size(with_added_tokens=True)
        anchor = tokenizer.encode("a", add_special_tokens=False).ids[:1]
        head = tokenizer.decode(anchor, skip_special_tokens=False) if anchor else ""
        pieces = tokenizer.decode_batch([anchor + [token] for token in range(n)], skip_special_tokens=False)
        texts = [piece[len(head):] if piece.startswith(head) else "" for piece in pieces]
        special = set(exclude)
        special.update(token for token, added in tokenizer.get_added_tokens_decoder().items() if added.special)
        for token in special:
            if 0 <= token < n:
                texts[token] = ""
        return cls(texts)

    def agreeing(self, rest: str, beyond: bool = False) -> list[int]:
        """Tokens whose text is a start of `rest` (shorter) or begins with all of it; `beyond`:
        a token that finishes `rest` must carry text after it (not `rest` alone, nor more blanks
        or a line break)."""
        found = [token for k in range(1, len(rest)) for token in self._by_text.get(rest[:k], ())]
        lo = bisect.bisect_left(self._sorted, rest)
        hi = bisect.bisect_left(self._sorted, rest + "\U0010ffff")
        for text in self._sorted[lo:hi]:
            if not beyond or text[len(rest):].strip():
                found.extend(self._by_text[text])
        return found

    def extends(self, head: str, after: str = "") -> bool:
        """Whether a token longer than `head` begins with it and agrees with `head + after` (the
        text that must follow): whether a piece that ends in `head` cut such a token in two."""
        whole = head + after
        lo = bisect.bisect_left(self._sorted, head)
        hi = bisect.bisect_left(self._sorted, head + "\U0010ffff")
        return any(len(text) > len(head) and (whole.startswith(text) or text.startswith(whole))
                   for text in self._sorted[lo:hi])

    def mask(self, rest: str, device: torch.device | str, beyond: bool = False) -> torch.Tensor:
        """[size] bool on `device`: the tokens `agreeing` with `rest`."""
        return self._entry(rest, device, beyond)[0]

    def agrees_below(self, rest: str, limit: int, device: torch.device | str, beyond: bool = False) -> bool:
        """Whether a token below `limit` agrees with `rest`: asked of the host, where the mask's
        `.any()` on a GPU would be a device sync."""
        return self._entry(rest, device, beyond)[1] < limit

    def _entry(self, rest: str, device: torch.device | str, beyond: bool) -> tuple[torch.Tensor, int]:
        key = (rest, str(device), beyond)
        cached = self._masks.get(key)
        if cached is not None:
            self._masks.move_to_end(key)
            return cached
        flags = torch.zeros(self.size, dtype=torch.bool)
        agree = self.agreeing(rest, beyond)
        if agree:
            flags[torch.tensor(agree)] = True
        entry = self._masks[key] = (flags.to(device), min(agree, default=self.size))
        if len(self._masks) > _MASKS_KEPT:
            self._masks.popitem(last=False)
        return entry

    def going_on(self, device: torch.device | str) -> torch.Tensor:
        """[size] bool on `device`: the tokens that write text on the line (something besides
        blanks, and no line break before it): what may follow a start the line cannot end after."""
        return self._mask(self._going_on, device, lambda: [
            token for token, text in self._text_of.items()
            if text.strip() and "\n" not in text[:len(text) - len(text.lstrip())]])

    def line_breaks(self, device: torch.device | str) -> torch.Tensor:
        """[size] bool on `device`: the tokens whose text holds a line break (special tokens
        hold none): where the block-wise loop ends a one-line slot."""
        return self._mask(self._line_breaks, device, lambda: self._breaks)

    def _mask(self, cache: dict[str, torch.Tensor], device: torch.device | str,
              tokens: Callable[[], list[int]]) -> torch.Tensor:
        """[size] bool on `device`, True at `tokens()`: built once per device into `cache`."""
        cached = cache.get(str(device))
        if cached is None:
            flags = torch.zeros(self.size, dtype=torch.bool)
            chosen = tokens()
            if chosen:
                flags[torch.tensor(chosen)] = True
            cached = cache[str(device)] = flags.to(device)
        return cached

    def text(self, token: int) -> str:
        """The token's text (as `of` decoded it); "" for a special token or a byte piece."""
        return self._text_of.get(token, "")


def goes_on(start: str) -> bool:
    """Whether a line cannot end after `start`: it ends in an assignment or comparison (`=`), a
    dot, or an operator that takes a right-hand side (`+`, `->`, `and` is a word: not here). Not
    `++` / `--` (a statement may end there), `...` (Python's Ellipsis) or `*/` (a comment's end)."""
    if start.endswith(("++", "--", "...", "*/")):
        return False
    return start[-1:] in _GOES_ON or start.endswith(("->", "=>"))


@dataclass(frozen=True)
class SpanStarts:
    """A request's rule: per slot, the text it must begin with ("" for none), and whether the
    line goes on after the text before it and that start (`goes_on`: then the slot writes text
    first, no end and no blank alone)."""

    starts: tuple[str, ...]
    index: TokenIndex
    going_on: tuple[bool, ...]

    @classmethod
    def for_request(cls, request: InfillRequest, index: Callable[[], TokenIndex]) -> "SpanStarts | None":
        """The request's rule, or None where no slot has one (`index` is asked only then:
        building it decodes the whole vocabulary). Only a slot the planner made (`heal_before`)
        in a programming language it knows (`request.language`; not prose, where a line may well
        end after a full stop) is held to go on after an operator: the benchmark's own modes hand
        the engine raw text."""
        starts = tuple(slot.starts_with for slot in request.slots)
        going_on = tuple(request.language is not None and slot.heal_before and goes_on(piece + slot.starts_with)
                         for piece, slot in zip(request.pieces, request.slots))
        return cls(starts, index(), going_on) if any(starts) or any(going_on) else None


class StartGate:
    """One run's state of a `SpanStarts` rule: what each candidate's slot has still to write.

    A step asks three things, in order, with the undecided positions `masked` [B, S] of its start:
    `restrict` (the frontier rows of pending slots keep only agreeing tokens; it remembers those
    frontiers for the step), `hold_back` (the pending slots' later positions get no commit) and
    `forced` (the frontiers, committed whatever their confidence); after the commit `record` takes
    the committed tokens off what is left to write. A slot whose start is written asks nothing
    more: once every slot's is, the gate costs nothing.
    """

    def __init__(self, starts: SpanStarts, batch: int, only_slot: int | None = None) -> None:
        self.index = starts.index
        slots = starts.starts if only_slot is None else (starts.starts[only_slot],)
        self.rest = [list(slots) for _ in range(batch)]      # [B][slot]: what is still to write
        # A start that ends in blanks (typed before the cursor) is followed by text in the token
        # that finishes it: ` x`, not ` ` and then an end, nor ` \n` (the user typed the blank to
        # go on writing on this line).
        self.beyond = [start[-1:] in (" ", "\t") for start in slots]
        # Where the line cannot end after the text before the slot and its start (an operator or
        # a dot: `x +=`, `s.`, `goes_on`), the slot's text goes on: the position after the start
        # takes no end and no blank-only token. [B][slot]: that position's offset in its slot,
        # once known (0 where there is no start to write).
        self.goes_on = list(starts.going_on if only_slot is None else (starts.going_on[only_slot],))
        # A slot with no start to write goes on from its first position.
        self.after: list[list[int | None]] = [[0 if on and not start else None for start, on in zip(slots, self.goes_on)]
                                              for _ in range(batch)]
        self._frontiers: list[tuple[int, int, int]] = []      # this step's (candidate, position, slot)
        self._slot_starts: dict[int, int] = {}                # each slot's first span position, this step

    @classmethod
    def for_run(cls, starts: SpanStarts | None, batch: int, only_slot: int | None = None) -> "StartGate | None":
        """The gate of a run with `batch` candidates, or None: no rule. `only_slot`: the run
        decodes that slot of the request alone (the block-wise loop), as its slot 0."""
        if starts is None or (only_slot is not None and not starts.starts[only_slot]
                              and not starts.going_on[only_slot]):
            return None
        return cls(starts, batch, only_slot)

    @property
    def pending(self) -> bool:
        return any(rest for row in self.rest for rest in row)

    def restrict(self, logits: torch.Tensor, selected: torch.Tensor, masked: torch.Tensor,
                 slot_of: torch.Tensor, n_slots: int) -> None:
        """logits [R, V] at the rows `selected` [B, S] picks (row-major): at each pending slot's
        frontier (its first position in `masked`), only tokens that agree with what is left."""
        self._frontiers = []
        if not self.pending and not any(at is not None for row in self.after for at in row):
            return
        n_span = masked.shape[1]
        firsts, chosen = slot_firsts(masked, slot_of, n_slots).tolist(), selected.tolist()
        rows = (selected.flatten().cumsum(0) - 1).tolist()
        owner = slot_of.tolist()
        slot_start = self._slot_starts = {slot: owner.index(slot) for slot in set(owner)}

        def go_on_at(b: int, position: int, slot: int) -> None:
            # The position after a start the line cannot end after: text, not an end or a blank.
            if position < n_span and owner[position] == slot and chosen[b][position]:
                _keep_only(logits[rows[b * n_span + position]], self.index.going_on(logits.device))

        for b, row in enumerate(self.rest):
            for slot, rest in enumerate(row):
                if not rest:
                    after = self.after[b][slot]
                    if after is not None and slot in slot_start:
                        go_on_at(b, slot_start[slot] + after, slot)
                    continue
                position = firsts[b][slot]
                if position >= n_span or not chosen[b][position]:
                    row[slot] = ""           # no undecided position to write it in: the rule gives up
                    continue
                # The logits may have more columns than the tokenizer has tokens (padded
                # embeddings: never an agreeing token) or fewer (tokens the model cannot write).
                vocab = logits.shape[-1]
                if not self.index.agrees_below(rest, vocab, logits.device, self.beyond[slot]):
                    row[slot] = ""           # no token agrees (a character split into bytes)
                    continue
                allowed = self.index.mask(rest, logits.device, self.beyond[slot])[:vocab]
                _keep_only(logits[rows[b * n_span + position]], allowed)
                self._frontiers.append((b, position, slot))
                if self.goes_on[slot]:
                    # Decided beside the frontier when its token finishes the start (hold_back
                    # lets it through): no end there either. Unfinished, it waits anyway.
                    go_on_at(b, position + 1, slot)

    def hold_back(self, conf: torch.Tensor, proposal: torch.Tensor, slot_of: torch.Tensor) -> torch.Tensor:
        """conf [B, S] with the positions after this step's frontiers, in their slots, at -inf,
        where the frontier's token (`proposal` [B, S]) does not finish the start: what follows an
        unfinished start waits for it, what follows a finished one is decided as usual (the step
        proposed it beside the frontier's token, as every parallel step does)."""
        if not self._frontiers:
            return conf
        tokens = proposal.tolist()
        index = torch.arange(conf.shape[1], device=conf.device)
        out = conf
        for b, position, slot in self._frontiers:
            if self.index.text(tokens[b][position]).startswith(self.rest[b][slot]):
                continue
            if out is conf:
                out = conf.clone()
            out[b, (slot_of == slot) & (index > position)] = -math.inf
        return out

    def forced(self, shape: torch.Size, device: torch.device) -> torch.Tensor | None:
        """[B, S] bool: this step's frontiers, committed whatever their confidence (None: none,
        as in every step once the starts are written)."""
        if not self._frontiers:
            return None
        out = torch.zeros(shape, dtype=torch.bool, device=device)
        for b, position, _ in self._frontiers:
            out[b, position] = True
        return out

    def record(self, proposal: torch.Tensor) -> None:
        """After the commit: each frontier's token (`proposal` [B, S]) taken off what is left."""
        if not self._frontiers:
            return
        tokens = proposal.tolist()
        for b, position, slot in self._frontiers:
            rest, text = self.rest[b][slot], self.index.text(tokens[b][position])
            self.rest[b][slot] = "" if text.startswith(rest) else rest[len(text):]
            if not self.rest[b][slot] and self.goes_on[slot]:
                self.after[b][slot] = position + 1 - self._slot_starts[slot]
        self._frontiers = []


def _keep_only(line: torch.Tensor, allowed: torch.Tensor) -> None:
    """One position's logits [V]: every token but the `allowed` ones ([<= V] bool) at -inf, and
    the columns past `allowed` too (padded embeddings: no token of the tokenizer)."""
    allowed = allowed[:line.shape[-1]]
    line[:allowed.shape[0]].masked_fill_(~allowed, -math.inf)
    line[allowed.shape[0]:] = -math.inf

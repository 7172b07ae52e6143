"""Lay an InfillRequest out as token ids: `[bos][prefix][MASK*L1][middle]...[suffix]`.

The context is cut to the model's budget around the first slot, keeping more prefix than
suffix: what comes before the cursor predicts the completion best.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .denoiser import Canvas, Denoiser
from .types import InfillRequest

# (text, role) -> token ids; role is "prefix", "middle1", ..., "suffix"
PieceEncoder = Callable[[str, str], list[int]]

PREFIX_SHARE = 0.75
# The prefix is cut from its start in steps of this many tokens, so that while the user types
# the kept prefix starts at the same token for a while and the model's cached context
# (arch/embedded_denoiser.py, PrefixCache) keeps matching; a cut one token at a time would
# shift every position at every keystroke that adds a token. It costs up to 15 tokens of the
# farthest context; a full re-prefill comes once per ~16 tokens typed instead of every one.
PREFIX_QUANTUM_TOKENS = 16
# Text between two slots takes at most this share of the budget (cut from its start, keeping
# what leads into the next slot): the planner sizes it to fit, this is the engine's guarantee.
MIDDLE_SHARE = 0.75
# Each piece is cut to this many characters per token of the budget before it is tokenized, so a
# request with megabytes of prefix (`dllm-lsp infill`, an API caller: the planner and the
# multi-site features cut theirs already) costs a tokenization of what can be kept, not seconds
# of the whole holding the GIL. Tokens of code average 3-4 characters; the shipped tokenizers'
# longest are ~80-character comment rulers. A text made mostly of those keeps fewer tokens than
# the budget (less context, never other context); any other keeps the budget's worth.
CUT_CHARS_PER_TOKEN = 32
# The prefix's character cut moves in steps of this many characters, so that while the user
# types at its end the text tokenized starts at the same character (the engine's incremental
# encoder and the model's cached context keep matching), as PREFIX_QUANTUM_TOKENS does for tokens.
PREFIX_QUANTUM_CHARS = 4096


class CanvasTooSmall(ValueError):
    """The request's slots leave no room for context in the model's positions."""


def build_canvas(denoiser: Denoiser, request: InfillRequest, context_budget: int,
                 encode_piece: PieceEncoder | None = None, start_tokens: int | None = None) -> Canvas:
    """Tokenize and lay out `request`; `context_budget` bounds the context tokens kept.
    `encode_piece` (the engine's incremental encoders) defaults to a plain encode.

    `start_tokens`: each slot starts at most this wide (the loop widens it up to its
    max_tokens, `Canvas.widened`); the context is cut for the full widths, so growing never
    pushes the canvas past the model's positions. None: every slot at its full width."""
    slot_tokens = sum(s.max_tokens for s in request.slots)
    budget = min(context_budget, denoiser.max_context - slot_tokens - 1)
    if budget < 2:
        raise CanvasTooSmall(
            f"slots of {slot_tokens} tokens leave no room for context in {denoiser.max_context} positions"
        )
    roles = ["prefix", *(f"middle{i}" for i in range(1, len(request.pieces) - 1)), "suffix"]
    encode = encode_piece or (lambda text, role: denoiser.encode(text))
    pieces = [encode(text, role) for text, role in zip(cut_pieces(request.pieces, budget), roles)]
    prefix, middles, suffix = pieces[0], pieces[1:-1], pieces[-1]
    middles = fit_middles(middles, int(budget * MIDDLE_SHARE))
    middle_total = sum(len(m) for m in middles)
    room = max(budget - middle_total, 2)
    # Give the prefix its share, then let either side use what the other leaves unused.
    prefix_room = max(int(room * PREFIX_SHARE), room - len(suffix))
    prefix = cut_prefix(prefix, prefix_room)
    suffix_room = room - len(prefix)
    suffix = suffix[:suffix_room]

    special = denoiser.special
    ids: list[int] = [special.bos_id] if special.bos_id is not None else []
    ids += prefix
    ranges: list[tuple[int, int]] = []
    context_after = middles + [suffix]
    for slot, after in zip(request.slots, context_after):
        start = len(ids)
        width = slot.max_tokens if start_tokens is None else min(slot.max_tokens, start_tokens)
        ids += [special.mask_id] * width
        ranges.append((start, len(ids)))
        ids += after
    max_widths = tuple(s.max_tokens for s in request.slots)
    narrow = any(b - a < w for (a, b), w in zip(ranges, max_widths))
    return Canvas(torch.tensor(ids, dtype=torch.long), ranges, tuple(s.single_line for s in request.slots),
                  max_widths if narrow else ())


def cut_pieces(pieces: list[str], budget: int) -> list[str]:
    """The request's text pieces cut by characters (CUT_CHARS_PER_TOKEN a token of `budget`) before
    they are tokenized: the prefix and the text between slots from their start, the suffix from its
    end. A piece already cut is left as it is (cutting twice gives the same text)."""
    limit = max(budget, 1) * CUT_CHARS_PER_TOKEN
    cut = [*pieces]
    for index in range(len(cut) - 1):   # the prefix and the middles: what leads into a slot
        cut[index] = cut_text_start(cut[index], limit)
    if len(cut) > 1 and len(cut[-1]) > limit:
        cut[-1] = cut[-1][:limit]
    return cut


def cut_text_start(text: str, limit: int) -> str:
    """`text` without its start when it is longer than `limit`: at least its last `limit`
    characters, from a multiple of PREFIX_QUANTUM_CHARS (stable while text is added at its end)."""
    if len(text) <= limit:
        return text
    return text[(len(text) - limit) // PREFIX_QUANTUM_CHARS * PREFIX_QUANTUM_CHARS:]


def cut_prefix(prefix: list[int], room: int) -> list[int]:
    """The prefix's last `room` tokens at most, cut from its start in PREFIX_QUANTUM_TOKENS steps
    (at most a quarter of the room) so that typing at its end leaves its first token in place."""
    if len(prefix) <= room:
        return prefix
    quantum = max(1, min(PREFIX_QUANTUM_TOKENS, room // 4))
    drop = -(-(len(prefix) - room) // quantum) * quantum
    return prefix[drop:]


def fit_middles(middles: list[list[int]], limit: int) -> list[list[int]]:
    """Cut the text between slots to `limit` tokens in all, each piece in proportion, from its
    start: a piece's end leads into the next slot."""
    total = sum(len(m) for m in middles)
    if total <= limit:
        return middles
    keep = [len(m) * limit // total for m in middles]
    return [m[len(m) - k:] if k else [] for m, k in zip(middles, keep)]

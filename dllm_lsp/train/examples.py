"""Turn a file and its spans into one training canvas, laid out exactly as the engine lays out
a request: `[prefix][slot 1][middle][slot 2]...[suffix]`, each piece tokenized on its own.

Each slot holds the true span tokens right-padded with `<pad>` to a random slot length, so
the model learns where a span ends; some slots are exactly full (no pad), as with an oracle
length; and some are narrower than their span (`short_slot_prob`): they hold its first tokens
and the text after them is what follows the whole span, so a slot filled to its end means "this
goes on", which is what the engine's slots that grow read it as (engine/denoise.py widens a full
slot). Without those, a full slot only ever meant "the span ends exactly here", and the model
squeezed long lines into the 16 tokens a slot starts with (2 of 65 such single lines got past
them, against 15 of 65 at full width). Context is cut around the spans to fill exactly `seq_len`
tokens.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from .spans import FileSpans, char_boundary, sample_spans

IGNORE = -100


@dataclass
class Example:
    ids: torch.Tensor         # [T] canvas with the true span tokens (and pads) in the slots
    is_span: torch.Tensor     # [T] bool
    ar_target: torch.Tensor   # [T] next context token for context positions, IGNORE elsewhere


@dataclass(frozen=True)
class LayoutOptions:
    seq_len: int = 256
    max_slot: int = 64          # longest slot (span tokens + pads)
    full_slot_prob: float = 0.15   # slot exactly as long as the span (the oracle-length case)
    short_slot_prob: float = 0.1   # slot narrower than the span: its first tokens, "it goes on"
    bytes_per_token: float = 6.0   # bytes tokenized per context token wanted, before a file's own ratio is measured


def encode_pieces(tokenizer: Tokenizer, pieces: list[str]) -> list[list[int]]:
    return [e.ids for e in tokenizer.encode_batch(pieces, add_special_tokens=False)]


# The widths a growing slot has at inference (it starts at slotStartTokens, 16 by default, and
# doubles): the widths a short slot is trained at.
GROWN_WIDTHS = (8, 16, 32, 64)


def slot_length(n_tokens: int, opts: LayoutOptions, rng: random.Random) -> int:
    """The slot's width for a span of `n_tokens`: wider (padded), exactly as wide, or narrower."""
    narrower = [w for w in GROWN_WIDTHS if w < n_tokens]
    if narrower and rng.random() < opts.short_slot_prob:
        return rng.choice(narrower)
    if n_tokens >= opts.max_slot or rng.random() < opts.full_slot_prob:
        return n_tokens
    return rng.randint(n_tokens + 1, opts.max_slot)


# Tokens kept clear of a window's cut edge: the word (pre-token) it cuts in two can tokenize into
# several tokens that differ from the whole file's; past it, the window's tokens are the file's.
EDGE_TOKENS = 16


def _window_tokens(tokenizer: Tokenizer, fs: FileSpans, start: int, end: int) -> list[int]:
    """data[start:end] tokenized as one piece; records the file's bytes per token for its next windows."""
    ids = encode_pieces(tokenizer, [fs.data[start:end].decode("utf-8")])[0]
    if len(ids) >= 32:
        fs.bytes_per_token = (end - start) / len(ids)
    return ids


def window_bytes(n: int, fs: FileSpans, opts: LayoutOptions) -> int:
    """How many bytes to tokenize for `n` tokens: the file's measured ratio with a margin, or the
    layout's cautious default before one was measured."""
    ratio = opts.bytes_per_token if fs.bytes_per_token is None else 1.2 * fs.bytes_per_token
    return int(n * ratio) + 8 * EDGE_TOKENS


def context_tokens(tokenizer: Tokenizer, fs: FileSpans, edge: int, n: int, opts: LayoutOptions,
                   before: bool) -> list[int]:
    """The `n` tokens of the file next to byte `edge` (the last ones before it, or the first ones
    from it), tokenized as one piece; fewer only where the file ends. Only a window about `n`
    tokens wide is tokenized, widened while it falls short; the tokens near its cut edge are
    never kept."""
    if n <= 0:
        return []
    width = window_bytes(n, fs, opts)
    while True:
        far = char_boundary(fs.data, max(0, edge - width) if before else min(len(fs.data), edge + width))
        ids = _window_tokens(tokenizer, fs, *((far, edge) if before else (edge, far)))
        if far in (0, len(fs.data)) or len(ids) >= n + EDGE_TOKENS:
            return ids[-n:] if before else ids[:n]
        width *= 2


def build_example(fs: FileSpans, spans: list[tuple[int, int]], tokenizer: Tokenizer, pad_id: int,
                  opts: LayoutOptions, rng: random.Random) -> Example | None:
    """The canvas for these spans, or None when they do not fit (too long, or too little context)."""
    if not spans:
        return None
    data = fs.data
    # The spans and the context between them, each piece tokenized on its own.
    texts = [data[a:b] for a, b in spans]
    texts += [data[b:spans[i + 1][0]] for i, (_, b) in enumerate(spans[:-1])]
    try:
        tokens = encode_pieces(tokenizer, [t.decode("utf-8") for t in texts])
    except UnicodeDecodeError:
        return None
    middles, inner = tokens[:len(spans)], tokens[len(spans):]
    if any(not m or len(m) > opts.max_slot for m in middles):
        return None
    slots = [slot_length(len(m), opts, rng) for m in middles]
    room = opts.seq_len - sum(slots) - sum(len(c) for c in inner)
    if room < 0:
        return None     # spans too far apart
    # A random prefix share: the editor sometimes has little before the cursor, sometimes little
    # after. Only the context the canvas takes is tokenized (it was most of an example's cost).
    want_prefix = int(room * rng.uniform(0.3, 1.0))
    prefix = context_tokens(tokenizer, fs, spans[0][0], want_prefix, opts, before=True)
    suffix = context_tokens(tokenizer, fs, spans[-1][1], room - len(prefix), opts, before=False)
    if len(prefix) + len(suffix) < room:
        # The file ends soon after the spans: the prefix takes the rest, if the file has it.
        prefix = context_tokens(tokenizer, fs, spans[0][0], room - len(suffix), opts, before=True)
        if len(prefix) + len(suffix) < room:
            return None     # the file is too short to fill the window

    ids: list[int] = []
    is_span: list[bool] = []
    ar: list[int] = []
    for k, piece in enumerate([prefix, *inner, suffix]):
        # Causal-LM targets: the next context token, never across a slot.
        ids += piece
        is_span += [False] * len(piece)
        ar += piece[1:] + [IGNORE] if piece else []
        if k < len(middles):
            slot = middles[k][:slots[k]] + [pad_id] * (slots[k] - len(middles[k]))
            ids += slot
            is_span += [True] * len(slot)
            ar += [IGNORE] * len(slot)
    assert len(ids) == opts.seq_len, (len(ids), opts.seq_len)
    return Example(torch.tensor(ids), torch.tensor(is_span), torch.tensor(ar))


def sample_example(fs: FileSpans, tokenizer: Tokenizer, pad_id: int, opts: LayoutOptions,
                   rng: random.Random, tries: int = 6) -> Example | None:
    for _ in range(tries):
        ex = build_example(fs, sample_spans(fs, rng), tokenizer, pad_id, opts, rng)
        if ex is not None:
            return ex
    return None

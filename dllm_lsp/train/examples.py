"""Turn a file and its spans into one training canvas, laid out exactly as the engine lays out
a request: `[prefix][slot 1][middle][slot 2]...[suffix]`, each piece tokenized on its own.

Each slot holds the true span tokens right-padded with `<pad>` to a random slot length, so
the model learns where a span ends; some slots are exactly full (no pad), as with an oracle
length. Context is cut around the spans to fill exactly `seq_len` tokens.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from .spans import FileSpans, sample_spans

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
    bytes_per_token: int = 6       # how much text to cut around spans before tokenizing


def encode_pieces(tokenizer: Tokenizer, pieces: list[str]) -> list[list[int]]:
    return [e.ids for e in tokenizer.encode_batch(pieces, add_special_tokens=False)]


def slot_length(n_tokens: int, opts: LayoutOptions, rng: random.Random) -> int:
    if n_tokens >= opts.max_slot or rng.random() < opts.full_slot_prob:
        return n_tokens
    return rng.randint(n_tokens + 1, opts.max_slot)


def build_example(fs: FileSpans, spans: list[tuple[int, int]], tokenizer: Tokenizer, pad_id: int,
                  opts: LayoutOptions, rng: random.Random) -> Example | None:
    """The canvas for these spans, or None when they do not fit (too long, or too little context)."""
    if not spans:
        return None
    data = fs.data
    window = opts.seq_len * opts.bytes_per_token
    texts = [data[max(0, spans[0][0] - window):spans[0][0]]]
    for i, (a, b) in enumerate(spans):
        texts.append(data[a:b])
        nxt = spans[i + 1][0] if i + 1 < len(spans) else min(len(data), b + window)
        texts.append(data[b:nxt])
    try:
        decoded = [t.decode("utf-8") for t in texts]
    except UnicodeDecodeError:
        return None
    tokens = encode_pieces(tokenizer, decoded)
    context, middles = tokens[0::2], tokens[1::2]
    if any(not m or len(m) > opts.max_slot for m in middles):
        return None
    slots = [slot_length(len(m), opts, rng) for m in middles]
    inner = sum(len(c) for c in context[1:-1])
    room = opts.seq_len - sum(slots) - inner
    prefix, suffix = context[0], context[-1]
    if room < 0 or len(prefix) + len(suffix) < room:
        return None     # spans too far apart, or the file is too short to fill the window
    # A random prefix share: the editor sometimes has little before the cursor, sometimes little after.
    want_prefix = int(room * rng.uniform(0.3, 1.0))
    n_prefix = min(len(prefix), max(want_prefix, room - len(suffix)))
    n_suffix = room - n_prefix
    context = [prefix[len(prefix) - n_prefix:], *context[1:-1], suffix[:n_suffix]]

    ids: list[int] = []
    is_span: list[bool] = []
    ar: list[int] = []

    def add_context(piece: list[int]) -> None:
        for j, tok in enumerate(piece):
            ids.append(tok)
            is_span.append(False)
            ar.append(piece[j + 1] if j + 1 < len(piece) else IGNORE)

    for k, piece in enumerate(context):
        add_context(piece)
        if k < len(middles):
            slot = middles[k] + [pad_id] * (slots[k] - len(middles[k]))
            ids.extend(slot)
            is_span.extend([True] * len(slot))
            ar.extend([IGNORE] * len(slot))
    assert len(ids) == opts.seq_len, (len(ids), opts.seq_len)
    return Example(torch.tensor(ids), torch.tensor(is_span), torch.tensor(ar))


def sample_example(fs: FileSpans, tokenizer: Tokenizer, pad_id: int, opts: LayoutOptions,
                   rng: random.Random, tries: int = 6) -> Example | None:
    for _ in range(tries):
        ex = build_example(fs, sample_spans(fs, rng), tokenizer, pad_id, opts, rng)
        if ex is not None:
            return ex
    return None

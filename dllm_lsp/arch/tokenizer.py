"""Byte-level BPE tokenizer for the embedded model, with its special tokens."""
from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

MASK, PAD, EOS = "<mask>", "<pad>", "<eos>"
SPECIAL_TOKENS = [MASK, PAD, EOS]   # ids 0, 1, 2 in that order


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    # No prefix space: "x" must encode the same at the start of a span as after a prefix.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def special_ids(tokenizer: Tokenizer) -> dict[str, int]:
    ids = {name: tokenizer.token_to_id(tok) for name, tok in (("mask", MASK), ("pad", PAD), ("eos", EOS))}
    missing = [name for name, i in ids.items() if i is None]
    if missing:
        raise ValueError(f"tokenizer lacks special tokens: {', '.join(missing)}")
    return ids

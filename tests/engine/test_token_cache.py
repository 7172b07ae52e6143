"""Incremental tokenization must give exactly the tokens of a full encode."""
from __future__ import annotations

import random

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from dllm_lsp.arch.tiny import sample_corpus
from dllm_lsp.arch.tokenizer import train_tokenizer
from dllm_lsp.engine.token_cache import IncrementalEncoder
from dllm_lsp.text_compare import common_prefix_length

# Qwen2's pre-tokenizer pattern (punctuation runs swallow following newlines): a different
# family of word boundaries than GPT-2's, which the cache must also respect.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def qwen_like_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(sample_corpus(), trainer=trainer)
    return tokenizer


@pytest.fixture(scope="module", params=["bytelevel", "qwen2-like"])
def tokenizer(request) -> Tokenizer:
    return train_tokenizer(sample_corpus(), 600) if request.param == "bytelevel" else qwen_like_tokenizer()


EDITS = ["a", " ", "\n", "(", ")", "x1", "é", "  ", "\n    ", "):\n", "'s", "😀", "\t", "12"]


@pytest.mark.parametrize("near_end", [True, False])
def test_random_edits_match_full_encoding(tokenizer, near_end):
    rng = random.Random(1 if near_end else 2)
    text = "".join(sample_corpus())[:3000]
    encoder = IncrementalEncoder(tokenizer)
    for _ in range(150):
        low = len(text) - 200 if near_end else 0
        at = rng.randint(max(low, 0), len(text))
        if rng.random() < 0.6:
            text = text[:at] + rng.choice(EDITS) + text[at:]
        else:
            text = text[:at] + text[at + rng.randint(1, 5):]
        assert encoder.encode(text) == tokenizer.encode(text, add_special_tokens=False).ids


def test_identical_text_is_served_from_the_cache(tokenizer):
    encoder = IncrementalEncoder(tokenizer)
    first = encoder.encode("def f(x):\n    return x\n")
    assert encoder.encode("def f(x):\n    return x\n") == first


@pytest.mark.parametrize("a, b, n", [("", "", 0), ("abc", "abd", 2), ("abc", "abc", 3), ("ab", "abc", 2), ("x", "y", 0)])
def test_common_prefix_length(a, b, n):
    assert common_prefix_length(a, b) == n

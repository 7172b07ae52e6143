"""Incremental tokenization: between keystrokes the context changes only near the cursor, so
the tokens before the first changed character are kept and only the tail is re-encoded.

Exactness: BPE merges never cross pre-token ("word") boundaries, and regex pre-tokenizers decide
a word from the text up to one character past its end. So every word that ends at least two
characters before the first change is unchanged, and encoding may restart at the start of any
such word. `Encoding.word_ids` tells where words start. Tests compare against full encodes.
"""
from __future__ import annotations

from tokenizers import Tokenizer

from dllm_lsp.text_compare import common_prefix_length

SAFETY_CHARS = 2   # a word must end this far before the first change to be kept


class IncrementalEncoder:
    """Encodes successive versions of one piece of text (the prefix, say), reusing the last one."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._text = ""
        self._ids: list[int] = []
        self._starts: list[int] = []       # char offset where each token starts
        self._word_start: list[bool] = []  # whether each token begins a new word

    def encode(self, text: str) -> list[int]:
        if text == self._text:
            return list(self._ids)
        keep = self._reusable_tokens(common_prefix_length(self._text, text))
        restart = self._starts[keep] if keep < len(self._starts) else len(self._text)
        if keep == 0:
            restart = 0
        tail = self.tokenizer.encode(text[restart:], add_special_tokens=False)
        words = tail.word_ids
        ids = self._ids[:keep] + tail.ids
        starts = self._starts[:keep] + [restart + start for start, _ in tail.offsets]
        word_start = self._word_start[:keep] + [
            i == 0 or words[i] != words[i - 1] or words[i] is None for i in range(len(words))
        ]
        self._text, self._ids, self._starts, self._word_start = text, ids, starts, word_start
        return list(ids)

    def _reusable_tokens(self, unchanged_chars: int) -> int:
        """Index of the last word start whose previous word ends safely before the change."""
        limit = unchanged_chars - SAFETY_CHARS
        index = len(self._starts) - 1
        while index > 0 and (self._starts[index] > limit or not self._word_start[index]):
            index -= 1
        return max(index, 0)

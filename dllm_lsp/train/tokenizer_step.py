"""Train the byte-level BPE tokenizer on the corpus' train split and count the corpus' tokens."""
from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer

from dllm_lsp.arch.tokenizer import special_ids, train_tokenizer
from dllm_lsp.cli_errors import one_line, output_file

from .corpus import iter_records


def load_tokenizer(path: Path) -> Tokenizer:
    """A tokenizer.json, or a ValueError naming the file (the tokenizers library raises a bare
    Exception that says neither which file nor what it was for)."""
    if not Path(path).is_file():
        raise ValueError(f"tokenizer file {path} not found (build one: dllm-lsp train tokenizer)")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ValueError(f"cannot read the tokenizer {path}: {one_line(exc)}") from None


# Text every training tokenizer must encode: code of both languages, blanks, non-ASCII letters
# and symbols (a corpus file may hold any of them).
PROBE_TEXT = 'def f(x):\n\treturn {"a": [x, 1.5e-3]}  # naïve → 😀\nconst g = (y) => `${y}`;\r\n'


def check_encodes(tokenizer: Tokenizer, path: Path) -> None:
    """Refuse a tokenizer that cannot encode code. One without an unknown token that meets a
    character it lacks (a word-level one, say) raised a bare Exception from the tokenizers library
    while the first batches were built: a traceback after the corpus was read."""
    try:
        tokenizer.encode(PROBE_TEXT, add_special_tokens=False)
    except Exception as exc:   # the tokenizers library raises a bare Exception
        raise ValueError(f"the tokenizer {path} cannot encode code ({one_line(exc)}): train a byte-level "
                         "one with dllm-lsp train tokenizer") from None


def build_tokenizer(corpus_dir: Path, out_path: Path, vocab_size: int, sample_bytes: int | None = None) -> Tokenizer:
    """BPE over the train split, or over its first `sample_bytes` (the corpus is shuffled: a random sample)."""
    if not 259 <= vocab_size <= 65536:
        raise ValueError(f"vocab size {vocab_size} must lie in [259, 65536] (256 bytes + 3 specials at least)")
    if sample_bytes is not None and sample_bytes <= 0:
        raise ValueError(f"--sample-mb must be more than 0, not {sample_bytes / 1e6:g}")
    try:
        output_file(str(out_path))    # checked before the training, not after it
    except argparse.ArgumentTypeError as exc:
        raise ValueError(str(exc)) from None
    texts = sampled((r["text"] for r in iter_records(corpus_dir, "train")), sample_bytes)
    tokenizer = train_tokenizer(texts, vocab_size)
    special_ids(tokenizer)   # raises if a special token went missing
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    try:
        tokenizer.save(str(out_path))
    except Exception as exc:   # the tokenizers library raises a bare Exception
        raise OSError(f"cannot write {out_path}: {one_line(exc)}") from None
    return tokenizer


def sampled(texts: Iterator[str], max_bytes: int | None) -> Iterator[str]:
    total = 0
    for text in texts:
        if max_bytes is not None and total >= max_bytes:
            return
        total += len(text)
        yield text


def count_tokens(corpus_dir: Path, tokenizer: Tokenizer, batch: int = 256) -> dict[str, int]:
    """Tokens per split, written into the corpus' stats.json for the model card."""
    counts: dict[str, int] = {}
    for split in ("train", "val"):
        total, texts = 0, []
        for rec in iter_records(corpus_dir, split):
            texts.append(rec["text"])
            if len(texts) == batch:
                total += sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))
                texts = []
        if texts:
            total += sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False))
        counts[split] = total
    stats_path = Path(corpus_dir) / "stats.json"
    if stats_path.is_file():
        stats = json.loads(stats_path.read_text())
        for split, n in counts.items():
            stats.setdefault(split, {})["tokens"] = n
        stats["tokenizer_vocab"] = tokenizer.get_vocab_size()
        stats_path.write_text(json.dumps(stats, indent=2) + "\n")
    return counts

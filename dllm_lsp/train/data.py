"""Training batches from a corpus folder: files are sampled by size, spans and layout at random.

An IterableDataset, so a GPU run can build batches in DataLoader worker processes while
the CPU run builds them inline. Each worker seeds its own generator.
"""
from __future__ import annotations

import itertools
import random
from collections import OrderedDict

import torch
from tokenizers import Tokenizer
from torch.utils.data import IterableDataset, get_worker_info

from .corpus import iter_records
from .examples import LayoutOptions, sample_example
from .spans import FileSpans


def load_files(corpus_dir, split: str, min_bytes: int = 0) -> list[tuple[str, str]]:
    """(text, language) of every corpus file of `split` that is long enough to fill a window."""
    return [(r["text"], r["language"]) for r in iter_records(corpus_dir, split) if len(r["text"]) >= min_bytes]


class SpanBatches(IterableDataset):
    def __init__(self, files: list[tuple[str, str]], tokenizer_path: str, pad_id: int, batch_size: int,
                 opts: LayoutOptions, seed: int = 0, cache_files: int = 512) -> None:
        if not files:
            raise ValueError("no corpus files are long enough for the training window")
        self.files, self.tokenizer_path, self.pad_id = files, tokenizer_path, pad_id
        self.batch_size, self.opts, self.seed, self.cache_files = batch_size, opts, seed, cache_files
        # Favour big files, without drowning small ones.
        self.cum_weights = list(itertools.accumulate(len(t) ** 0.5 for t, _ in files))

    def __iter__(self):
        info = get_worker_info()
        worker = info.id if info else 0
        rng = random.Random(self.seed * 1000 + worker)
        tokenizer = Tokenizer.from_file(self.tokenizer_path)
        cache: OrderedDict[int, FileSpans] = OrderedDict()
        while True:
            batch = []
            while len(batch) < self.batch_size:
                i = rng.choices(range(len(self.files)), cum_weights=self.cum_weights)[0]
                fs = cache.get(i)
                if fs is None:
                    text, lang = self.files[i]
                    try:
                        fs = FileSpans.analyse(text, lang)
                    except ValueError:
                        continue
                    cache[i] = fs
                    if len(cache) > self.cache_files:
                        cache.popitem(last=False)
                ex = sample_example(fs, tokenizer, self.pad_id, self.opts, rng)
                if ex is not None:
                    batch.append(ex)
            yield (torch.stack([e.ids for e in batch]), torch.stack([e.is_span for e in batch]),
                   torch.stack([e.ar_target for e in batch]))


def fixed_batches(dataset: SpanBatches, count: int) -> list[tuple[torch.Tensor, ...]]:
    """A fixed set of batches (the validation set is drawn once so losses are comparable)."""
    it = iter(dataset)
    return [next(it) for _ in range(count)]

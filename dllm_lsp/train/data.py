"""Training batches from a corpus folder: files are sampled by size, spans and layout at random.

An IterableDataset, so a GPU run can build batches in DataLoader worker processes while
the CPU run builds them inline. Each worker seeds its own generator.
"""
from __future__ import annotations

import copy
import itertools
import os
import random
import shutil

import torch
from tokenizers import Tokenizer
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from dllm_lsp.engine.denoiser import plain_text_tokenizer

from .corpus import iter_records
from .examples import LayoutOptions, sample_example
from .spans import FileSpans


def load_files(corpus_dir, split: str, min_bytes: int = 0) -> list[tuple[str, str]]:
    """(text, language) of every corpus file of `split` that is long enough to fill a window."""
    return [(r["text"], r["language"]) for r in iter_records(corpus_dir, split) if len(r["text"]) >= min_bytes]


# Examples a parsed file serves (dllm-lsp bench training-data, gpu-30m layout, one core: 2.6x the
# batches a second of parsing a file per example; docs/training.md).
USES_PER_FILE = 8.0


class SpanBatches(IterableDataset):
    """Endless batches of canvases. Parsing a file (tree-sitter, then collecting its nodes) costs
    more than an example drawn from it, so each parsed file serves about `uses_per_file`
    examples: a draw reuses a file from a pool of `pool_files` parsed ones, or parses a new one
    (chosen by size) in place of a random pool member. Every file drawn serves the same number of
    examples on average, so the mix of files is the one the size weights give; the pool spreads a
    file's examples over many batches."""

    def __init__(self, files: list[tuple[str, str]], tokenizer_path: str, pad_id: int, batch_size: int,
                 opts: LayoutOptions, seed: int = 0, pool_files: int = 512, uses_per_file: float = USES_PER_FILE) -> None:
        if not files:
            raise ValueError("no corpus files are long enough for the training window")
        if uses_per_file < 1:
            raise ValueError("uses_per_file must be at least 1")
        self.files, self.tokenizer_path, self.pad_id = files, tokenizer_path, pad_id
        self.batch_size, self.opts, self.seed = batch_size, opts, seed
        self.pool_files, self.uses_per_file = pool_files, uses_per_file
        # Favour big files, without drowning small ones.
        self.cum_weights = list(itertools.accumulate(len(t) ** 0.5 for t, _ in files))

    def __iter__(self):
        info = get_worker_info()
        worker = info.id if info else 0
        rng = random.Random(self.seed * 1000 + worker)
        tokenizer = plain_text_tokenizer(Tokenizer.from_file(self.tokenizer_path))
        pool: list[FileSpans] = []
        reuse = 1.0 - 1.0 / self.uses_per_file
        while True:
            batch = []
            while len(batch) < self.batch_size:
                if pool and rng.random() < reuse:
                    fs = rng.choice(pool)
                else:
                    text, lang = self.files[rng.choices(range(len(self.files)), cum_weights=self.cum_weights)[0]]
                    try:
                        fs = FileSpans.analyse(text, lang)
                    except ValueError:
                        continue
                    if len(pool) < self.pool_files:
                        pool.append(fs)
                    else:
                        pool[rng.randrange(len(pool))] = fs
                ex = sample_example(fs, tokenizer, self.pad_id, self.opts, rng)
                if ex is not None:
                    batch.append(ex)
            yield (torch.stack([e.ids for e in batch]), torch.stack([e.is_span for e in batch]),
                   torch.stack([e.ar_target for e in batch]))


def own_process_group(worker_id: int) -> None:
    """A DataLoader worker's init: leave the trainer's process group. The GPU job stops a trainer by
    signalling its group (SIGTERM, then SIGKILL), and Ctrl-C signals the terminal's: the workers
    died with it, and torch's SIGCHLD handler raised "DataLoader worker is killed by signal" in the
    trainer wherever it was, a traceback instead of the final save. Now the trainer alone gets the
    signal, stops at its next step and shuts its workers down itself; a trainer killed outright
    still takes them with it (each worker exits when it sees its parent gone)."""
    if hasattr(os, "setpgid"):
        os.setpgid(0, 0)


class TrainBatches:
    """The training loop's batches: from `workers` DataLoader processes, or built in this process.

    Worker processes hand their batches over through /dev/shm, which a container may keep small
    (Docker's default is 64 MB). So the workers are fewer when the batches they keep queued would
    not fit there, and a worker that dies anyway (a bus error on a full /dev/shm, the OOM killer)
    does not end the run: training goes on with batches built in this process, slower, with the
    failure logged once and kept in `fallback`."""

    PREFETCH = 2     # batches each worker keeps queued (the DataLoader's default)

    def __init__(self, dataset: SpanBatches, workers: int, pin_memory: bool, log=print,
                 shm: str = "/dev/shm") -> None:
        self.dataset, self.pin_memory, self.log = dataset, pin_memory, log
        self.fallback: str | None = None
        self.workers = self.fitting_workers(workers, shm)
        self._it = None

    def fitting_workers(self, workers: int, shm: str) -> int:
        if workers <= 0:
            return 0
        try:
            free = shutil.disk_usage(shm).free
        except OSError:
            return workers          # no /dev/shm to measure: torch picks its own way
        opts = self.dataset.opts
        batch_bytes = self.dataset.batch_size * opts.seq_len * (8 + 1 + 8)   # ids, is_span, targets
        fits = int(free // (2 * self.PREFETCH * batch_bytes))                 # half of it, at most
        if fits < workers:
            self.log(f"{shm} has {free / 2**20:.0f} MiB free: {max(fits, 0)} data workers instead of {workers}")
        return max(0, min(workers, fits))

    def __next__(self):
        try:
            if self._it is None:
                self._it = iter(DataLoader(self.dataset, batch_size=None, num_workers=self.workers,
                                           pin_memory=self.pin_memory, prefetch_factor=self.PREFETCH,
                                           persistent_workers=True, worker_init_fn=own_process_group)) if self.workers else iter(self.dataset)
            return next(self._it)
        except RuntimeError as exc:
            if not self.workers or self.fallback is not None:
                raise
            self.fallback = f"{type(exc).__name__}: {exc}".splitlines()[0]
            self.log(f"the DataLoader's {self.workers} workers failed ({self.fallback}); "
                     "building batches in the training process from now on")
            # Its own seed: the in-process stream would otherwise replay worker 0's batches.
            rest = copy.copy(self.dataset)
            rest.seed = self.dataset.seed + 7919
            self._it = iter(rest)
            return next(self._it)

    def __iter__(self):
        return self


def fixed_batches(dataset: SpanBatches, count: int) -> list[tuple[torch.Tensor, ...]]:
    """A fixed set of batches (the validation set is drawn once so losses are comparable)."""
    it = iter(dataset)
    return [next(it) for _ in range(count)]

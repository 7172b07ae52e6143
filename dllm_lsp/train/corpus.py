"""Build the training corpus: licensed files -> filtered, deduplicated, split train/val by file.

Output folder: train.jsonl and val.jsonl (one file per line: text, language, license,
origin, path) and stats.json (counts, bytes, licenses, why files were dropped, throughput).
They are written beside the folder and renamed into place once whole and on the disk
(train/folder.py), so a rebuild that is interrupted or fails leaves the old corpus as it was.

The per-file work (reading, the quality filters, the benchmark check, the exact key and the
MinHash signature) runs in worker processes; the one parent process keeps the deduplication
indexes and writes the output in the shuffled file order, so the corpus is the same whatever
the number of workers.
"""
from __future__ import annotations

import json
import multiprocessing
import random
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dllm_lsp.cpus import usable_cpus
from dllm_lsp.lifetime import cleanup_on_termination

from .decontam import benchmark_signatures, contaminated
from .filters import NearDuplicateIndex, exact_key, rejection
from .whole_folder import begin_next_version, fsync_tree, partial_folder, put_in_place
from .sources import SourceFile, default_folders, files_in

# The files a build writes; anything else in the corpus folder is carried over to the new one.
CORPUS_FILES = frozenset({"train.jsonl", "val.jsonl", "stats.json"})


@dataclass
class CorpusOptions:
    folders: list[Path] = field(default_factory=list)   # empty: default_folders()
    max_bytes: int | None = None        # stop once this much text is kept (a random sample of files)
    val_percent: float = 2.0
    seed: int = 0
    languages: tuple[str, ...] = ("python", "javascript")
    max_share: dict[str, float] = field(default_factory=lambda: {"javascript": 0.15})
    decontaminate: list[Path] = field(default_factory=list)   # benchmark jsonl(.gz) files to keep out
    assume_license: str | None = None
    workers: int | None = None          # processes analysing files (None: every core; 1: in this process)
    max_seconds: float | None = None    # stop taking files after this long (the files are shuffled: a sample)


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def in_validation(key: str, percent: float) -> bool:
    """A stable split by content hash, so a file lands on the same side on every rebuild."""
    return int(key[:8], 16) % 10_000 < percent * 100


@dataclass
class Analysis:
    """What a worker learns about one file; text is None when the file was rejected."""

    reason: str | None
    text: str | None = None
    key: str = ""
    signature: np.ndarray | None = None


_SIGNATURES: set[str] = set()
_NEAR = NearDuplicateIndex()   # used only for its (pure) signature function in the workers


def _init_worker(signatures: set[str]) -> None:
    global _SIGNATURES
    _SIGNATURES = signatures


def analyse(path: Path) -> Analysis:
    text = read_text(path)
    if text is None:
        return Analysis("unreadable")
    reason = rejection(text)
    if reason is None and contaminated(text, _SIGNATURES):
        reason = "benchmark"
    if reason:
        return Analysis(reason)
    return Analysis(None, text, exact_key(text), _NEAR.signature(text))


def analysed(paths: list[Path], signatures: set[str], workers: int) -> Iterator[Analysis]:
    """analyse() over `paths`, in order; stops its workers when the caller stops iterating."""
    if workers <= 1:
        _init_worker(signatures)
        yield from map(analyse, paths)
        return
    # spawn, not fork: the caller may hold threads (torch), and forking a threaded process is unsafe.
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker, initargs=(signatures,))
    try:
        yield from pool.map(analyse, paths, chunksize=32)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def collect_sources(opts: CorpusOptions) -> list[SourceFile]:
    folders = opts.folders or default_folders()
    seen: set[Path] = set()
    out: list[SourceFile] = []
    for folder in folders:
        for src in files_in(Path(folder), opts.assume_license):
            real = src.path.resolve()
            if src.language in opts.languages and real not in seen:
                seen.add(real)
                out.append(src)
    return out


def check_corpus_options(opts: CorpusOptions, out_dir: Path) -> None:
    """Refuse (ValueError naming the option) settings that would build an empty or useless corpus."""
    if not 0 <= opts.val_percent < 100:
        raise ValueError(f"--val-percent must be at least 0 and below 100 (the share of files kept for "
                         f"validation; the rest train), not {opts.val_percent:g}")
    if opts.max_bytes is not None and opts.max_bytes <= 0:
        raise ValueError(f"--max-mb must be more than 0, not {opts.max_bytes / 1e6:g}")
    if opts.max_seconds is not None and not opts.max_seconds > 0:
        raise ValueError(f"--max-seconds must be more than 0, not {opts.max_seconds:g}")
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"corpus folder {out_dir} is a file, not a folder")


def build_corpus(opts: CorpusOptions, out_dir: Path, log=print) -> dict:
    out_dir = Path(out_dir)
    check_corpus_options(opts, out_dir)
    t0 = time.time()
    sources = collect_sources(opts)
    if not sources:
        raise ValueError("no permissively licensed source files found in the given folders")
    random.Random(opts.seed).shuffle(sources)   # a byte cap then keeps a random sample, not the first folder
    signatures = benchmark_signatures(opts.decontaminate)
    # The corpus is written beside its folder and renamed into place once whole and synced, as a
    # model folder is. It was rewritten in place: a rebuild over an existing corpus that was
    # interrupted (Ctrl-C, the GPU job's SIGTERM at its time box) or failed (a full disk) left
    # half a train.jsonl, which the next `train` read as the whole corpus. SIGTERM and SIGHUP
    # run the cleanup as Ctrl-C does (lifetime.py), so no half-written copy is left beside it
    # either. Begun once the sources and the benchmark are read: a refused build (a missing
    # folder, nothing licensed in it, an unreadable benchmark file) touches nothing.
    with cleanup_on_termination():
        partial = partial_folder(out_dir)
        try:
            begin_next_version(out_dir, leave_out=CORPUS_FILES)
            result = _write_corpus(opts, sources, signatures, partial, t0, log)
            fsync_tree(partial)         # the data on the disk before a rename can publish it
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        put_in_place(partial, out_dir)
    return result


def _write_corpus(opts: CorpusOptions, sources: list[SourceFile], signatures: set[str], out_dir: Path,
                  t0: float, log) -> dict:
    """Analyse `sources` (in their shuffled order) and write the kept files and the stats into
    `out_dir`, a new folder; the figures (stats.json's)."""
    workers = opts.workers or usable_cpus()
    exact: set[str] = set()
    near = NearDuplicateIndex()
    dropped: Counter[str] = Counter()
    kept_bytes: Counter[str] = Counter()
    stats = {split: {"files": 0, "bytes": 0, "by_language": Counter(), "licenses": Counter()}
             for split in ("train", "val")}
    total = seen = read_bytes = 0
    results = analysed([s.path for s in sources], signatures, workers)
    # closing: the workers stop when the loop does, a byte cap's early stop, an error or an interrupt
    with closing(results), open(out_dir / "train.jsonl", "w", encoding="utf-8") as train_fh, \
         open(out_dir / "val.jsonl", "w", encoding="utf-8") as val_fh:
        for src, found in zip(sources, results):
            seen += 1
            if opts.max_bytes is not None and total >= opts.max_bytes:
                break
            if opts.max_seconds is not None and time.time() - t0 >= opts.max_seconds:
                dropped["time-box"] = len(sources) - seen + 1
                break
            if found.text is not None:
                read_bytes += len(found.text)
            reason = found.reason
            if reason is None and found.key in exact:
                reason = "exact-duplicate"
            if reason is None and near.seen_signature(found.signature):
                reason = "near-duplicate"
            if reason:
                dropped[reason] += 1
                continue
            text = found.text
            size = len(text.encode("utf-8"))
            # A capped language's share of what is kept so far, this file included (it was a share
            # of --max-mb, so without one nothing was capped: a test corpus came out 77% JS).
            share = opts.max_share.get(src.language)
            if share is not None and kept_bytes[src.language] + size > share * (total + size):
                dropped["language-share"] += 1
                continue
            exact.add(found.key)
            split = "val" if in_validation(found.key, opts.val_percent) else "train"
            rec = {"text": text, "language": src.language, "license": src.license, "origin": src.origin,
                   "path": str(src.path)}
            (val_fh if split == "val" else train_fh).write(json.dumps(rec) + "\n")
            s = stats[split]
            s["files"] += 1
            s["bytes"] += size
            s["by_language"][src.language] += size
            s["licenses"][src.license] += 1
            kept_bytes[src.language] += size
            total += size
            if seen % 2000 == 0:
                rate = seen / max(time.time() - t0, 1e-9)
                log(f"corpus: {seen}/{len(sources)} files seen, {total / 1e6:.1f} MB kept, {rate:.0f} files/s")
    seconds = time.time() - t0
    result = {
        "candidates": len(sources), "dropped": dict(dropped), "seconds": round(seconds, 1),
        # Throughput, so the GPU job can size its corpus phase for the machine it runs on.
        "workers": workers, "files_seen": seen,
        "files_per_second": round(seen / max(seconds, 1e-9), 1),
        "mb_read_per_second": round(read_bytes / 1e6 / max(seconds, 1e-9), 2),
        "decontaminated_against": [str(p) for p in opts.decontaminate],
        **{split: {k: dict(v) if isinstance(v, Counter) else v for k, v in s.items()} for split, s in stats.items()},
    }
    (out_dir / "stats.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def iter_records(corpus_dir: Path, split: str):
    path = Path(corpus_dir) / f"{split}.jsonl"
    if not path.is_file():
        raise ValueError(f"{path} not found: build the corpus first (dllm-lsp train corpus)")
    # A torn or foreign line was a bare "Unterminated string starting at: line 1 column 10" or a
    # KeyError: 'text' from the trainer, naming neither the file nor the line.
    number = 0
    try:
        with open(path, encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                record = json.loads(line)
                if not (isinstance(record, dict) and isinstance(record.get("text"), str)
                        and isinstance(record.get("language"), str)):
                    raise ValueError("not a record with a text and a language")
                yield record
    except UnicodeDecodeError as exc:   # raised decoding a chunk beyond the lines read (its line is unknown)
        raise ValueError(f"{path}: not UTF-8 text past line {number} ({exc.reason}); "
                         "build the corpus again (dllm-lsp train corpus)") from None
    except ValueError as exc:           # JSONDecodeError is one
        raise ValueError(f"{path}, line {number}: not a corpus record ({exc}); "
                         "build the corpus again (dllm-lsp train corpus)") from None

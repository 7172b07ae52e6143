"""Build the training corpus: licensed files -> filtered, deduplicated, split train/val by file.

Output folder: train.jsonl and val.jsonl (one file per line: text, language, license,
origin, path) and stats.json (counts, bytes, licenses, why files were dropped).
"""
from __future__ import annotations

import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .decontam import benchmark_signatures, contaminated
from .filters import NearDuplicateIndex, exact_key, rejection
from .sources import SourceFile, default_folders, files_in


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


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def in_validation(key: str, percent: float) -> bool:
    """A stable split by content hash, so a file lands on the same side on every rebuild."""
    return int(key[:8], 16) % 10_000 < percent * 100


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


def build_corpus(opts: CorpusOptions, out_dir: Path, log=print) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    sources = collect_sources(opts)
    if not sources:
        raise ValueError("no permissively licensed source files found in the given folders")
    random.Random(opts.seed).shuffle(sources)   # a byte cap then keeps a random sample, not the first folder
    signatures = benchmark_signatures(opts.decontaminate)
    exact: set[str] = set()
    near = NearDuplicateIndex()
    dropped: Counter[str] = Counter()
    kept_bytes: Counter[str] = Counter()
    stats = {split: {"files": 0, "bytes": 0, "by_language": Counter(), "licenses": Counter()}
             for split in ("train", "val")}
    total = 0
    with open(out_dir / "train.jsonl", "w", encoding="utf-8") as train_fh, \
         open(out_dir / "val.jsonl", "w", encoding="utf-8") as val_fh:
        for i, src in enumerate(sources):
            if opts.max_bytes is not None and total >= opts.max_bytes:
                break
            share = opts.max_share.get(src.language)
            if share is not None and opts.max_bytes and kept_bytes[src.language] >= share * opts.max_bytes:
                dropped["language-share"] += 1
                continue
            text = read_text(src.path)
            if text is None:
                dropped["unreadable"] += 1
                continue
            reason = rejection(text)
            if reason is None and contaminated(text, signatures):
                reason = "benchmark"
            key = exact_key(text)
            if reason is None and key in exact:
                reason = "exact-duplicate"
            if reason is None and near.seen(text):
                reason = "near-duplicate"
            if reason:
                dropped[reason] += 1
                continue
            exact.add(key)
            split = "val" if in_validation(key, opts.val_percent) else "train"
            size = len(text.encode("utf-8"))
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
            if i % 2000 == 0:
                log(f"corpus: {i}/{len(sources)} files seen, {total / 1e6:.1f} MB kept")
    result = {
        "candidates": len(sources), "dropped": dict(dropped), "seconds": round(time.time() - t0, 1),
        "decontaminated_against": [str(p) for p in opts.decontaminate],
        **{split: {k: dict(v) if isinstance(v, Counter) else v for k, v in s.items()} for split, s in stats.items()},
    }
    (out_dir / "stats.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def iter_records(corpus_dir: Path, split: str):
    path = Path(corpus_dir) / f"{split}.jsonl"
    if not path.is_file():
        raise ValueError(f"{path} not found: build the corpus first (dllm-lsp train corpus)")
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            yield json.loads(line)

"""`dllm-lsp bench training-data`: how fast one core builds training batches, and so how many
DataLoader workers a GPU run needs to keep its GPU busy.

Batches of a preset's layout (canvas length, slot sizes, batch size) are built in this process
from a corpus folder (`dllm-lsp train corpus`) and a tokenizer, exactly as one DataLoader worker
of `dllm-lsp train model` builds them, for each `--uses-per-file` value: how many examples a
parsed file serves (1 parses a file for every example). The variants are timed in interleaved
rounds, each keeping its own pool of parsed files across rounds, and the figures are medians
over the rounds. With `--workers N` training's own setting is also run through a DataLoader with N
worker processes, as training runs it. JSON with the host, versions and settings.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch

from dllm_lsp.arch.tokenizer import special_ids
from dllm_lsp.cli_errors import output_file, report as report_error, write_out
from dllm_lsp.train.data import USES_PER_FILE, SpanBatches, TrainBatches, load_files
from dllm_lsp.train.examples import LayoutOptions
from dllm_lsp.train.presets import preset
from dllm_lsp.train.tokenizer_step import load_tokenizer

from .environment import environment

PROG = "dllm-lsp bench training-data"


def batch_seconds(batches, count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        next(batches)
    return (time.perf_counter() - start) / count


def run_training_data_bench(corpus: Path, tokenizer: Path, preset_name: str, uses: list[float],
                            rounds: int = 5, batches_per_round: int = 4, workers: int = 0,
                            target_steps_per_second: float | None = None, log=print) -> dict:
    p = preset(preset_name)
    layout = LayoutOptions(seq_len=p["seq_len"], max_slot=p["max_slot"])
    pad = special_ids(load_tokenizer(tokenizer))["pad"]
    files = load_files(corpus, "train", layout.seq_len * 3)
    datasets = {u: SpanBatches(files, str(tokenizer), pad, p["batch_size"], layout, seed=7, uses_per_file=u)
                for u in uses}
    iterators = {u: iter(ds) for u, ds in datasets.items()}
    for u, it in iterators.items():      # the first batch loads the tokenizer and the grammar
        next(it)
    times: dict[float, list[float]] = {u: [] for u in uses}
    for r in range(rounds):
        for u, it in iterators.items():
            times[u].append(batch_seconds(it, batches_per_round))
        log(f"round {r + 1}/{rounds}: " + ", ".join(f"{u:g} uses {1000 * times[u][-1]:.0f} ms a batch"
                                                     for u in uses), flush=True)
    rows = []
    for u in uses:
        per_batch = statistics.median(times[u])
        row = {"uses_per_file": u, "batch_ms_p50": round(1000 * per_batch, 1),
               "examples_per_second": round(p["batch_size"] / per_batch, 1),
               "ms_per_example": round(1000 * per_batch / p["batch_size"], 2),
               "steps_per_second_per_worker": round(1 / per_batch, 2)}
        if target_steps_per_second:
            row["workers_for_target"] = math.ceil(target_steps_per_second * per_batch)
        rows.append(row)
    result = {"benchmark": "training batches built per second (one DataLoader worker's rate)",
              "environment": environment("cpu"),
              "settings": {"corpus": str(corpus), "tokenizer": str(tokenizer), "preset": preset_name,
                           "seq_len": layout.seq_len, "max_slot": layout.max_slot, "batch_size": p["batch_size"],
                           "train_files": len(files), "rounds": rounds, "batches_per_round": batches_per_round,
                           "torch_threads": torch.get_num_threads(),
                           "target_steps_per_second": target_steps_per_second},
              "one_core": rows}
    base = next((r for r in rows if r["uses_per_file"] == 1), None)
    if base is not None:
        result["speedup_over_one_use"] = {f"{r['uses_per_file']:g}": round(base["batch_ms_p50"] / r["batch_ms_p50"], 2)
                                          for r in rows if r is not base}
    if workers > 0:
        ds = SpanBatches(files, str(tokenizer), pad, p["batch_size"], layout, seed=11)
        loader = TrainBatches(ds, workers, pin_memory=False, log=log)     # as training runs it
        for _ in range(workers):     # every worker up and past its first batch
            next(loader)
        # Long enough that the batches the workers had queued before the clock started weigh little.
        count = max(batches_per_round * rounds * workers, 20 * workers)
        per_batch = batch_seconds(loader, count)
        result["data_loader"] = {"workers": loader.workers, "uses_per_file": ds.uses_per_file, "batches": count,
                                 "steps_per_second": round(1 / per_batch, 2),
                                 "examples_per_second": round(p["batch_size"] / per_batch, 1)}
        log(f"DataLoader, {workers} workers: {1 / per_batch:.2f} batches/s", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True, help="corpus folder (dllm-lsp train corpus)")
    ap.add_argument("--tokenizer", type=Path, required=True, help="tokenizer.json")
    ap.add_argument("--preset", default="gpu-30m", help="the layout and batch size to build (default gpu-30m)")
    ap.add_argument("--uses-per-file", default=f"1,4,{USES_PER_FILE:g}",
                    help=f"comma-separated: examples a parsed file serves (default 1,4,{USES_PER_FILE:g}; "
                         f"training uses {USES_PER_FILE:g})")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=4, help="batches per variant per round")
    ap.add_argument("--workers", type=int, default=0, help="also run a DataLoader with this many worker processes")
    ap.add_argument("--target-steps-per-second", type=float, default=None,
                    help="GPU steps a second to feed: the rows then say how many workers that takes")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: one worker's share)")
    ap.add_argument("--out", type=output_file, default=None, help="write the JSON here too")
    a = ap.parse_args(argv)
    try:
        uses = [float(x) for x in a.uses_per_file.split(",") if x.strip()]
        if not uses or any(u < 1 for u in uses):
            raise ValueError("--uses-per-file takes numbers of at least 1")
        if a.rounds < 1 or a.batches < 1:
            raise ValueError("--rounds and --batches must be at least 1")
        if a.workers < 0:
            raise ValueError(f"--workers must be at least 0, not {a.workers}")
        if a.threads < 1:
            raise ValueError(f"--threads must be at least 1, not {a.threads}")
        torch.set_num_threads(a.threads)
        result = run_training_data_bench(a.corpus, a.tokenizer, a.preset, uses, a.rounds, a.batches,
                                         a.workers, a.target_steps_per_second)
    except (ValueError, OSError, KeyError) as exc:
        return report_error(PROG, exc)
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        write_out(a.out, text + "\n", PROG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The loss-curve PNG of a training log (train_log.jsonl): training and validation losses against tokens."""
from __future__ import annotations

import json
from pathlib import Path

from dllm_lsp.cli_errors import write_figure


def read_log(path: Path) -> tuple[list[dict], list[dict]]:
    train, val = [], []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "loss" in rec and "tokens" in rec:
            train.append(rec)
        elif "val_diffusion" in rec and "tokens" in rec:
            val.append(rec)
    return train, val


def plot_loss_curve(log_path: Path, png_path: Path, title: str = "training loss",
                    run_starts: list[float] | None = None) -> Path:
    """Raises ImportError when matplotlib is missing (the caller notes it and goes on).
    `run_starts`: the tokens at which each later run began (a continued model), drawn as
    dashed lines: a fresh optimizer warms up again there, and its validation files may differ."""
    import matplotlib   # noqa: PLC0415  (optional: only the plot needs it)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt   # noqa: PLC0415

    train, val = read_log(log_path)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for key, label in (("diffusion", "masked-span loss (train)"), ("ar", "causal LM loss (train)")):
        points = [(r["tokens"] / 1e6, r[key]) for r in train if key in r]
        if points:
            ax.plot(*zip(*points), label=label, linewidth=1)
    for key, label in (("val_diffusion", "masked-span loss (validation)"), ("val_ar", "causal LM loss (validation)")):
        points = [(r["tokens"] / 1e6, r[key]) for r in val if key in r]
        if points:
            ax.plot(*zip(*points), "o-", label=label, markersize=3)
    for i, start in enumerate(run_starts or [], 2):
        ax.axvline(start / 1e6, color="grey", linestyle="--", linewidth=1)
        ax.annotate(f"run {i}", (start / 1e6, 0), xycoords=("data", "axes fraction"), xytext=(3, 4),
                    textcoords="offset points", color="grey", fontsize=8)
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("loss (nats per token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png_path = Path(png_path)
    try:
        write_figure(fig, png_path)   # whole or not at all: a card never links half a PNG
    finally:
        plt.close(fig)
    return png_path

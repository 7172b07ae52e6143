"""`dllm-lsp train {corpus,tokenizer,model,all,card}`: corpus -> tokenizer -> model folder.

`all` runs the three steps into one work folder; each step can also be run (and re-run) alone.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from dllm_lsp.cli_errors import refuse_unknown_choice, report as report_error
from dllm_lsp.eval.tasks import DATA_ENV, default_data_dir
from dllm_lsp.loader import read_config

from .card import write_card
from .corpus import CorpusOptions, build_corpus
from .examples import LayoutOptions
from dllm_lsp.model_folder import ModelLoadError

from .loop import TrainingDiverged, TrainOptions, check_options, train
from .objective import ObjectiveOptions
from .presets import MODEL_KEYS, PRESETS, preset
from .tokenizer_step import build_tokenizer, count_tokens

def default_decontamination() -> list[Path]:
    """The benchmark files to keep out of the corpus when none are named: those `eval` reads
    ($DLLM_LSP_EVAL_DATA, else the checkout's shared folder). An installed package has no such
    folder: it built its corpus against nothing, without a word, so that is refused (corpus_options)."""
    folder = default_data_dir()
    return sorted(folder.glob("*.jsonl*")) if folder.is_dir() else []


def add_corpus_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--folder", action="append", type=Path, default=[],
                   help="source folder (repeatable; default: this Python's stdlib and site-packages, npm globals)")
    p.add_argument("--max-mb", type=float, default=None, help="stop after this many MB of kept text")
    p.add_argument("--val-percent", type=float, default=2.0)
    p.add_argument("--languages", default="python,javascript")
    p.add_argument("--assume-license", default=None, help="SPDX license of plain folders given with --folder")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop taking files after this many seconds (files are shuffled, so a random sample)")
    p.add_argument("--jobs", type=int, default=None,
                   help="processes reading and filtering files (default: every core; 1: no worker processes)")
    p.add_argument("--decontaminate", action="append", type=Path, default=None,
                   help="benchmark jsonl(.gz) whose functions must not be in the corpus "
                        "(default: every file in ../shared/eval/human-eval-infilling)")


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default=None,
                   help="tiny-test, cpu-small or gpu-30m (default: cpu-small; continuing a folder: the preset "
                        "its architecture matches, with the window and slot size it was trained on)")
    for key in (*MODEL_KEYS, "seq_len", "max_slot", "batch_size", "warmup"):
        p.add_argument(f"--{key.replace('_', '-')}", type=int, default=None)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--layout", choices=("causal_context", "bidirectional"), default=None,
                   help="attention layout of a new model (default: causal_context)")
    p.add_argument("--steps", type=int, default=None, help="step budget")
    p.add_argument("--minutes", type=float, default=None, help="time budget (the schedule anneals to it)")
    p.add_argument("--device", default="auto")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (CUDA, or a CPU with a C++ compiler)")
    p.add_argument("--attention", choices=("auto", "mask", "flex"), default="auto",
                   help="training attention: SDPA with a boolean mask, or flex attention (default: flex when "
                        "compiled on CUDA)")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bf16 autocast (default: on CUDA only; worth it on CPUs with AMX)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes building batches")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--save-every", type=int, default=500)
    p.add_argument("--weighting", choices=("masked_mean", "inv_t"), default="masked_mean")
    p.add_argument("--ar-weight", type=float, default=0.5, help="weight of the causal LM loss on context tokens")
    p.add_argument("--late-pad-weight", type=float, default=0.1,
                   help="loss weight of pads after a slot's first pad (the first pad keeps weight 1)")
    p.add_argument("--ar-fraction", type=float, default=1.0, help="share of context positions it scores")
    p.add_argument("--save-dtype", choices=("bfloat16", "float32", "int8"), default="bfloat16",
                   help="weight storage in the model folder (int8: row-wise scales, a quarter of fp32)")
    p.add_argument("--save-minutes", type=float, default=None, help="also write the model folder every N minutes")
    p.add_argument("--init-from", type=Path, default=None,
                   help="continue training this model folder (its architecture; pass its tokenizer.json)")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--seed", type=int, default=0)


def corpus_options(a) -> CorpusOptions:
    decontaminate = a.decontaminate if a.decontaminate is not None else default_decontamination()
    if not decontaminate:
        raise ValueError(f"no benchmark files to keep out of the corpus in {default_data_dir()}: name the "
                         "HumanEval-Infilling files with --decontaminate FILE (repeatable) or their folder "
                         f"with ${DATA_ENV}")
    return CorpusOptions(folders=a.folder, max_bytes=int(a.max_mb * 1e6) if a.max_mb is not None else None,
                         val_percent=a.val_percent, languages=tuple(a.languages.split(",")),
                         decontaminate=decontaminate,
                         assume_license=a.assume_license, workers=a.jobs,
                         max_seconds=a.max_seconds)


DEFAULT_PRESET = "cpu-small"


def run_defaults(a) -> dict:
    """The preset a run's unset flags come from. A continued folder (`--init-from`, `--resume`)
    without `--preset` keeps what it was trained with: the preset its architecture matches, and
    its recorded window and slot size. It got cpu-small's: the 30M model continued so trained on
    256-token windows and 48-token slots, and its config then recorded those."""
    folder = a.init_from if getattr(a, "init_from", None) is not None else (a.out if getattr(a, "resume", False) else None)
    if a.preset is not None or folder is None or not (Path(folder) / "config.json").is_file():
        return preset(a.preset or DEFAULT_PRESET)
    config = read_config(Path(folder))   # a damaged config.json: one line naming it, not a bare JSON error
    name = next((n for n, p in PRESETS.items() if all(p[k] == config.get(k) for k in MODEL_KEYS)), DEFAULT_PRESET)
    defaults = preset(name)
    recorded = config.get("training") if isinstance(config.get("training"), dict) else {}
    defaults.update({k: v for k, v in recorded.items() if k in ("seq_len", "max_slot") and isinstance(v, int)})
    return defaults


def train_options(a, corpus: Path, tokenizer: Path, out: Path) -> TrainOptions:
    p = run_defaults(a)
    for key in (*MODEL_KEYS, "seq_len", "max_slot", "batch_size", "warmup", "lr"):
        if getattr(a, key, None) is not None:
            p[key] = getattr(a, key)
    model = {k: p[k] for k in MODEL_KEYS if k != "vocab_size"}
    model["attention_layout"] = a.layout or "causal_context"
    # The architecture flags given on the command line (not the preset's): a continued model
    # keeps its own, so these are checked against it rather than silently ignored.
    given = tuple(k for k in model if getattr(a, "layout" if k == "attention_layout" else k, None) is not None)
    return TrainOptions(
        corpus=corpus, out=out, tokenizer=tokenizer, model=model,
        layout=LayoutOptions(seq_len=p["seq_len"], max_slot=p["max_slot"]),
        objective=ObjectiveOptions(weighting=a.weighting, ar_weight=a.ar_weight, ar_fraction=a.ar_fraction,
                                   late_pad_weight=a.late_pad_weight),
        batch_size=p["batch_size"], lr=p["lr"], warmup=p["warmup"], max_steps=a.steps, minutes=a.minutes,
        device=a.device, compile=a.compile, attention=a.attention, bf16=a.bf16, workers=a.workers,
        threads=a.threads, eval_every=a.eval_every, save_every=a.save_every, seed=a.seed, save_dtype=a.save_dtype, resume=a.resume,
        save_minutes=a.save_minutes, init_from=a.init_from, model_given=given,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="dllm-lsp train", description=__doc__)
    sub = ap.add_subparsers(dest="step", required=True)
    c = sub.add_parser("corpus", help="collect, filter, deduplicate and split source files")
    c.add_argument("--out", type=Path, required=True)
    add_corpus_args(c)
    t = sub.add_parser("tokenizer", help="train the byte-level BPE tokenizer on a corpus")
    t.add_argument("--corpus", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True, help="tokenizer.json to write")
    t.add_argument("--vocab-size", type=int, default=8192)
    t.add_argument("--sample-mb", type=float, default=None, help="train on the first N MB of the (shuffled) corpus")
    t.add_argument("--no-count", action="store_true", help="skip counting the corpus' tokens (stats.json)")
    m = sub.add_parser("model", help="train a model folder on a corpus with a tokenizer")
    m.add_argument("--corpus", type=Path, required=True)
    m.add_argument("--tokenizer", type=Path, required=True)
    m.add_argument("--out", type=Path, required=True, help="model folder to write")
    add_model_args(m)
    al = sub.add_parser("all", help="corpus, tokenizer and model into WORK/{corpus,tokenizer.json} and --out")
    al.add_argument("--work", type=Path, required=True)
    al.add_argument("--out", type=Path, required=True)
    add_corpus_args(al)
    add_model_args(al)
    cd = sub.add_parser("card", help="write MODEL_CARD.md from training.json, corpus stats and eval results")
    cd.add_argument("--model", type=Path, required=True)
    cd.add_argument("--corpus", type=Path, default=None, help="corpus folder whose stats.json to record")
    cd.add_argument("--eval", type=Path, action="append", default=[], help="eval JSON (--out of dllm-lsp eval)")
    cd.add_argument("--title", default=None)
    cd.add_argument("--preamble", type=Path, default=None, help="markdown put under the title")
    cd.add_argument("--closing", type=Path, default=None, help="markdown put at the end")
    refuse_unknown_choice(ap, argv, sub.choices, "step")
    a = ap.parse_args(argv)
    try:
        if a.step == "corpus":
            print(json.dumps(build_corpus(corpus_options(a), a.out), indent=2))
        elif a.step == "tokenizer":
            tok = build_tokenizer(a.corpus, a.out, a.vocab_size, int(a.sample_mb * 1e6) if a.sample_mb is not None else None)
            print(json.dumps({"vocab": tok.get_vocab_size(),
                              "tokens": None if a.no_count else count_tokens(a.corpus, tok)}))
        elif a.step == "model":
            train(train_options(a, a.corpus, a.tokenizer, a.out))
        elif a.step == "card":
            try:
                path = write_card(a.model, a.corpus, a.eval, a.title or a.model.name,
                                  a.preamble.read_text() if a.preamble else "", a.closing.read_text() if a.closing else "")
            except KeyError as exc:     # said `error: 'modes'`, naming neither the file nor the field
                raise ValueError(f"cannot write the card of {a.model}: {exc.args[0]!r} is missing from its "
                                 "training.json, config.json or an --eval file") from None
            print(path)
        else:
            corpus, tok_path = a.work / "corpus", a.work / "tokenizer.json"
            options = train_options(a, corpus, tok_path, a.out)
            check_options(options, files=False)    # the model's settings, before the corpus and tokenizer
            build_corpus(corpus_options(a), corpus)
            vocab = a.vocab_size or preset(a.preset or DEFAULT_PRESET)["vocab_size"]
            count_tokens(corpus, build_tokenizer(corpus, tok_path, vocab))
            train(options)
    except (ValueError, OSError, KeyError, ModelLoadError, TrainingDiverged) as exc:
        return report_error("dllm-lsp train", exc)
    return 0

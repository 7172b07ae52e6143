"""The training loop: AdamW, warmup + cosine decay over a step or time budget, bf16 autocast and
torch.compile on CUDA, periodic validation loss and checkpoints (the model folder is always
loadable), a JSON-lines log kept beside the model.
"""
from __future__ import annotations

import io
import json
import math
import os
import platform
import signal
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from safetensors import SafetensorError
from tokenizers import Tokenizer

from dllm_lsp.arch.embedded import EmbeddedConfig, EmbeddedModel
from dllm_lsp.arch.tokenizer import special_ids
from dllm_lsp.arch.weight_storage import load_weights
from dllm_lsp.cli_errors import one_line
from dllm_lsp.engine.engine import out_of_memory
from dllm_lsp.loader import ModelLoadError, embedded_config, read_config, resolve_device
from dllm_lsp.model_folder import check_finite, load_json_file, nonfinite_weights

from .data import SpanBatches, TrainBatches, fixed_batches, load_files
from .examples import LayoutOptions
from .folder import save_model_folder
from .whole_folder import fsync_path, recover_model_folder
from .objective import ObjectiveOptions, diffusion_loss
from .tokenizer_step import check_encodes, load_tokenizer


MAX_SKIPPED_IN_A_ROW = 20   # non-finite steps in a row that end a run as diverged


class TrainingDiverged(Exception):
    """The loss, the gradients or the weights went NaN or infinite and stayed so; the model folder
    keeps the last weights that were finite."""


class CheckpointFailed(OSError):
    """The model folder could not be written (a full disk, say); it keeps its last whole save."""


@dataclass
class TrainOptions:
    corpus: Path
    out: Path
    tokenizer: Path
    model: dict = field(default_factory=dict)     # EmbeddedConfig fields
    layout: LayoutOptions = field(default_factory=LayoutOptions)
    objective: ObjectiveOptions = field(default_factory=ObjectiveOptions)
    batch_size: int = 16
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 100
    weight_decay: float = 0.1
    max_steps: int | None = None
    minutes: float | None = None
    device: str = "auto"
    compile: bool = False
    compile_backend: object = "inductor"   # torch.compile's backend (a test passes one that fails)
    attention: str = "auto"       # "mask" (SDPA + boolean mask), "flex", or auto: flex when compiled on CUDA
    bf16: bool | None = None      # autocast to bf16; None = on CUDA only (CPUs with AMX gain from it too)
    workers: int = 0
    threads: int | None = None
    eval_every: int = 200
    eval_batches: int = 8
    save_every: int = 500
    seed: int = 0
    save_dtype: str = "bfloat16"  # bfloat16, float32 or int8 (row-wise scales: the shipped model's storage)
    resume: bool = False
    save_minutes: float | None = None   # also write the model folder every this many minutes
    init_from: Path | None = None       # continue training this model folder (its architecture and tokenizer)
    model_given: tuple[str, ...] = ()   # keys of `model` the user set: a continued model must agree with them


def lr_at(progress: float, step: int, opts: TrainOptions) -> float:
    if step < opts.warmup:
        return opts.lr * (step + 1) / opts.warmup
    cos = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return opts.lr * (opts.min_lr_ratio + (1 - opts.min_lr_ratio) * cos)


def training_attention(opts: TrainOptions, device: torch.device) -> str:
    if opts.attention == "auto":
        # Flex attention is only fast compiled, and torch has no flex backward on the CPU.
        return "flex" if device.type == "cuda" and opts.compile else "mask"
    if opts.attention not in ("mask", "flex"):
        raise ValueError(f"attention must be auto, mask or flex, not {opts.attention!r}")
    if opts.attention == "flex" and device.type != "cuda":
        raise ValueError("flex attention trains on CUDA only (torch has no flex backward on the CPU); use --attention mask")
    return opts.attention


def hardware(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


@torch.no_grad()
def validate(model, batches, opts: TrainOptions, device, autocast) -> dict[str, float]:
    model.eval()
    # The uncompiled model validates: flex attention is only fast (and only well trodden)
    # compiled, so it validates through SDPA with the same layout mask (the same outputs, tested).
    attention, model.training_attention = model.training_attention, "mask"
    gen = torch.Generator(device=device).manual_seed(1234)   # same masks every time: comparable losses
    totals: dict[str, float] = {}
    try:
        for ids, is_span, ar in batches:
            with autocast():
                out = diffusion_loss(model, ids.to(device), is_span.to(device), ar.to(device), opts.objective, gen)
            for k, v in out.items():
                totals[k] = totals.get(k, 0.0) + float(v)
    finally:
        model.training_attention = attention
        model.train()
    return {f"val_{k}": v / len(batches) for k, v in totals.items()}


def run_settings(options: dict, bf16: bool | None) -> dict:
    """What a run's record keeps of its options (a continued folder's card lists every run)."""
    keep = {key: options[key] for key in ("lr", "batch_size", "warmup", "threads") if key in options}
    seq_len = (options.get("layout") or {}).get("seq_len")
    corpus = options.get("corpus")
    return {**keep, **({"seq_len": seq_len} if seq_len else {}), **({"corpus": str(corpus)} if corpus else {}),
            **({"bf16_autocast": bf16} if bf16 is not None else {})}


def continued_config(folder: Path, tokenizer: Tokenizer, seq_len: int) -> tuple[EmbeddedConfig, dict]:
    """The architecture and the counters of a model folder whose training continues."""
    if not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
        raise ValueError(f"{folder} is not a model folder to continue (config.json and model.safetensors needed)")
    # Read as the loader reads it: a damaged config.json is one line naming the file (it was a
    # traceback, or a bare "Expecting value: line 2 column 1").
    cfg = embedded_config(folder, read_config(folder))
    if cfg.vocab_size != tokenizer.get_vocab_size():
        raise ValueError(f"{folder} has a vocabulary of {cfg.vocab_size}, the tokenizer {tokenizer.get_vocab_size()}: "
                         "continue it with its own tokenizer.json")
    cfg.max_positions = max(cfg.max_positions, seq_len)   # RoPE: longer windows need no new weights
    summary_path = folder / "training.json"
    summary = load_json_file(summary_path) if summary_path.is_file() else {}
    if not isinstance(summary, dict):
        raise ModelLoadError(f"{summary_path} must hold a JSON object")
    # A folder trained before runs were recorded holds one run: its summary's totals and options.
    runs = summary.get("runs") or ([{"steps": summary.get("steps", 0), "tokens": summary.get("tokens", 0),
                                     "seconds": summary.get("seconds", 0.0), "hardware": summary.get("hardware", "?"),
                                     **run_settings(summary.get("options", {}), summary.get("bf16_autocast"))}]
                                   if summary else [])
    previous = {"steps": int(summary.get("steps", 0)), "tokens": int(summary.get("tokens", 0)),
                "seconds": float(summary.get("seconds", 0.0)), "runs": runs}
    return cfg, previous


def logged_step(line: str) -> float:
    """The step of a train_log.jsonl line (a line that cannot be read: none, kept)."""
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return -math.inf
    return step if isinstance(step, (int, float)) else -math.inf


def check_architecture(opts: TrainOptions, cfg: EmbeddedConfig) -> None:
    """A continued model keeps its architecture. An architecture flag that disagrees with it was
    silently ignored (the run trained the folder's model and recorded the flag), so it is refused."""
    flag = {"attention_layout": "--layout"}
    clash = [f"{flag.get(key, '--' + key.replace('_', '-'))} {opts.model[key]} (it has {getattr(cfg, key)})"
             for key in opts.model_given if opts.model[key] != getattr(cfg, key)]
    if clash:
        how = "--resume" if opts.resume else "--init-from"
        raise ValueError(f"{how} continues the model's own architecture: {'; '.join(clash)}; drop the flag, "
                         f"or train a new model into another --out")


def check_out_folder(out: Path) -> None:
    """Refuse, before any work, an `--out` that cannot be made or written beside (a save writes the
    next version beside it and renames it in place). The folder itself is made at the run's first
    record, so this is the early check its `mkdir` used to be."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a model folder")
    existing = out.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"cannot write the model folder {out}: {existing} is a file")
    if not os.access(existing, os.W_OK):
        raise ValueError(f"cannot write the model folder {out}: {existing} is read-only or not ours to write")


def check_options(opts: TrainOptions, files: bool = True) -> torch.device:
    """The device to train on; refuses (ValueError naming the option) what would crash the run or
    never end it, before any work. `files`: also that the tokenizer and the corpus exist."""
    if opts.max_steps is None and opts.minutes is None:
        raise ValueError("give a step budget (--steps) or a time budget (--minutes)")
    at_least_one = {"--steps": opts.max_steps, "--batch-size": opts.batch_size, "--seq-len": opts.layout.seq_len,
                    "--max-slot": opts.layout.max_slot, "--eval-every": opts.eval_every,
                    "--save-every": opts.save_every, "--threads": opts.threads,
                    **{f"--{key.replace('_', '-')}": value for key, value in opts.model.items()
                       if key in ("dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim")}}
    for name, value in at_least_one.items():
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    for name, value in {"--minutes": opts.minutes, "--save-minutes": opts.save_minutes}.items():
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be more than 0, not {value:g}")
    for name, value in {"--warmup": opts.warmup, "--workers": opts.workers, "--lr": opts.lr}.items():
        if not 0 <= value < math.inf:     # --lr 0 is allowed: a run that only measures
            raise ValueError(f"{name} must be a number of at least 0, not {value:g}")
    if opts.layout.max_slot >= opts.layout.seq_len:
        raise ValueError(f"--max-slot ({opts.layout.max_slot}) must be less than --seq-len ({opts.layout.seq_len}): "
                         "the window holds the slot and its context")
    try:
        device = resolve_device(opts.device)
    except ModelLoadError as exc:
        raise ValueError(f"--device: {exc}") from None
    check_out_folder(Path(opts.out))
    if not files:
        return device
    check_encodes(load_tokenizer(opts.tokenizer), opts.tokenizer)
    train_split = Path(opts.corpus) / "train.jsonl"
    if not train_split.is_file():
        raise ValueError(f"{train_split} not found: build the corpus first (dllm-lsp train corpus)")
    return device


def train(opts: TrainOptions, log=print) -> dict:
    device = check_options(opts)
    tokenizer = load_tokenizer(opts.tokenizer)
    specials = special_ids(tokenizer)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    torch.manual_seed(opts.seed)
    previous = {"steps": 0, "tokens": 0, "seconds": 0.0, "runs": []}
    out = Path(opts.out)
    state_path = out.parent / f".{out.name}.train_state.pt"   # optimizer state: kept outside the shipped folder
    recover_model_folder(out)    # a save killed between its two renames left the folder aside
    if opts.resume and not state_path.is_file():
        # It used to start afresh from random weights, over the trained folder, and exit 0.
        raise ValueError(f"--resume: no optimizer state at {state_path} (it is kept beside the model folder, "
                         f"not in it): continue the folder with --init-from {out} instead")
    if opts.resume and (out / "config.json").is_file():
        # Its architecture, and the counters of the runs before the one resumed (the folder's
        # training.json ends with that run, which the optimizer state carries on).
        cfg, previous = continued_config(out, tokenizer, opts.layout.seq_len)
        earlier = previous["runs"][:-1]
        previous = {"steps": sum(r.get("steps", 0) for r in earlier), "tokens": sum(r.get("tokens", 0) for r in earlier),
                    "seconds": sum(r.get("seconds", 0.0) for r in earlier), "runs": earlier}
    elif opts.init_from is not None:
        # Continue a model folder (a shipped model, say): its architecture, weights and counters;
        # the optimizer starts fresh, so the schedule warms up again.
        cfg, previous = continued_config(Path(opts.init_from), tokenizer, opts.layout.seq_len)
    else:
        cfg = EmbeddedConfig(**{**opts.model, "vocab_size": tokenizer.get_vocab_size(),
                                "max_positions": opts.layout.seq_len, "mask_token_id": specials["mask"],
                                "pad_token_id": specials["pad"], "eos_token_id": specials["eos"]})
    if opts.resume or opts.init_from is not None:
        check_architecture(opts, cfg)
        # The record says what was trained: the folder's architecture, not the preset's.
        opts = replace(opts, model={key: getattr(cfg, key) for key in opts.model})
    model = EmbeddedModel(cfg).to(device)
    if opts.init_from is not None and not opts.resume:
        try:
            state = load_weights(Path(opts.init_from) / "model.safetensors", device)
            check_finite(state, Path(opts.init_from))
            model.load_state_dict(state, strict=True)
        except (ModelLoadError, ValueError, RuntimeError) as exc:   # ValueError: an unreadable or odd weights file
            raise ValueError(f"--init-from {opts.init_from}: {' '.join(str(exc).split())[:300]}") from None
        log(f"continuing {opts.init_from}: {previous['steps']} steps, {previous['tokens']} tokens so far")
    model.training_attention = training_attention(opts, device)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optim = torch.optim.AdamW([{"params": decay, "weight_decay": opts.weight_decay},
                               {"params": no_decay, "weight_decay": 0.0}],
                              lr=opts.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
    step, tokens, elapsed_before = 0, 0, 0.0
    if opts.resume:
        try:
            state = torch.load(state_path, map_location=device, weights_only=True)
            model.load_state_dict(state["model"])
            optim.load_state_dict(state["optim"])
            step, tokens, elapsed_before = state["step"], state["tokens"], state["elapsed"]
        except Exception as exc:   # noqa: BLE001 - a corrupt file or another model's: one line, not a traceback
            raise ValueError(f"--resume: the optimizer state {state_path} cannot continue this model "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from None
        log(f"resumed at step {step}")

    min_bytes = opts.layout.seq_len * 3
    train_files = load_files(opts.corpus, "train", min_bytes)
    val_files = load_files(opts.corpus, "val", min_bytes)
    pad = specials["pad"]
    train_ds = SpanBatches(train_files, str(opts.tokenizer), pad, opts.batch_size, opts.layout, opts.seed + step)
    val_ds = SpanBatches(val_files or train_files[:50], str(opts.tokenizer), pad, opts.batch_size, opts.layout, 999)
    val_batches = fixed_batches(val_ds, opts.eval_batches)
    loader = TrainBatches(train_ds, opts.workers, pin_memory=device.type == "cuda", log=log)

    use_bf16 = device.type == "cuda" if opts.bf16 is None else opts.bf16
    if use_bf16 and device.type == "cpu" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        # Measured on an AVX2-only AMD EPYC (cpu-small, batch 16 x 256, 2 threads): 22 s a step
        # with bf16 autocast against 1.1 s in fp32; emulated bf16 is no speed-up but a trap.
        log(f"warning: this CPU ({torch.backends.cpu.get_cpu_capability()}) has no native bf16 "
            "(AVX512-BF16 or AMX): bf16 autocast runs emulated, about 20x slower than fp32; drop --bf16")

    def autocast():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16)
    step_model = torch.compile(model, backend=opts.compile_backend) if opts.compile else model
    stepped = False                 # a step ran: a failure after the first is no compiler's
    compile_failed: str | None = None

    def loss_and_grads(forward, ids, is_span, ar) -> dict[str, torch.Tensor]:
        optim.zero_grad(set_to_none=True)
        with autocast():
            losses = diffusion_loss(forward, ids, is_span, ar, opts.objective)
        losses["loss"].backward()
        return losses
    n_params = model.num_parameters()
    log(f"model: {n_params / 1e6:.2f}M parameters on {hardware(device)}; {len(train_files)} train files")
    log_path = out / "train_log.jsonl"
    earlier_log = (Path(opts.init_from) / "train_log.jsonl") if opts.init_from is not None else None
    earlier = earlier_log.read_text(encoding="utf-8") if earlier_log is not None and earlier_log.is_file() else ""
    log_fh = None
    resumed_at = previous["steps"] + step   # the step the optimizer state holds (0: a fresh run)

    def record(rec: dict) -> None:
        """Append `rec` to the log. The folder and its log are made, or an existing log taken
        over, at the first record (after the first step): a run refused before it (a corpus too
        small for the window, a first step out of memory) leaves `out` as it found it. It made
        an empty folder, or truncated a trained folder's log, and then said it could not train."""
        nonlocal log_fh
        if log_fh is None:
            out.mkdir(parents=True, exist_ok=True)
            if opts.resume and log_path.is_file():
                # The records past the resumed step: a run killed between two saves had logged steps the
                # optimizer state does not hold, and this run logs them again (the curve went backwards).
                kept = [line for line in log_path.read_text(encoding="utf-8").splitlines(keepends=True)
                        if logged_step(line) <= resumed_at]
                log_path.write_text("".join(kept), encoding="utf-8")
            log_fh = open(log_path, "a" if opts.resume else "w", encoding="utf-8")
            if earlier and not opts.resume:
                log_fh.write(earlier if earlier.endswith("\n") else earlier + "\n")   # one loss curve across runs
        log_fh.write(json.dumps(rec) + "\n")
        log_fh.flush()
    # Steps, tokens and seconds in the log and the summary count every run of this model.
    base_steps, base_tokens, base_seconds = previous["steps"], previous["tokens"], previous["seconds"]
    last_save = time.time()
    best_val = math.inf
    t_start = time.time()
    data_wait = 0.0      # seconds this run waited for the DataLoader: too many, and --workers is too low
    skipped = skipped_in_a_row = 0   # steps whose loss or gradient was NaN or infinite (not applied)
    last_val: dict[str, float] = {}

    def data_wait_share() -> float:
        return data_wait / max(time.time() - t_start, 1e-9)

    def checkpoint(final: bool = False) -> bool:
        """Write the model folder; False (and nothing written) when the weights are not finite."""
        nonlocal saved_step, log_fh
        elapsed = elapsed_before + time.time() - t_start
        summary = {
            "parameters": n_params, "steps": base_steps + step, "tokens": base_tokens + tokens,
            "seconds": round(base_seconds + elapsed, 1),
            "runs": [*previous["runs"], {"steps": step, "tokens": tokens, "seconds": round(elapsed, 1),
                                         "hardware": hardware(device), "continued_from": str(opts.init_from or ""),
                                         **run_settings(asdict(opts), use_bf16)}],
            "hardware": hardware(device), "torch": torch.__version__, "bf16_autocast": use_bf16,
            "attention": model.training_attention,
            "compile": opts.compile and compile_failed is None, "final": final, **last_val,
            **({"compile_failed": compile_failed} if compile_failed else {}),
            "data_wait_share": round(data_wait_share(), 3), "skipped_steps": skipped, "diverged": diverged,
            **({"data_loader_failed": loader.fallback} if loader.fallback else {}),
            "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts).items()},
        }
        # Recorded for the engine and eval: the canvas and slot sizes the model was trained on.
        layout = {"seq_len": opts.layout.seq_len, "max_slot": opts.layout.max_slot}
        # Never replace a good folder with a broken one: the unattended GPU job ships what is here.
        bad = nonfinite_weights(model.state_dict())
        if bad:
            log(f"step {base_steps + step}: the weights hold NaN or infinite values ({bad[0]}); not saved")
            return False
        # The optimizer state goes through a temporary name too: written in place, a kill or a
        # full disk left a torn file that --resume refused (and torch.save's failure on a full
        # disk was a RuntimeError traceback, not a line).
        buffer = io.BytesIO()
        torch.save({"model": model.state_dict(), "optim": optim.state_dict(), "step": step,
                    "tokens": tokens, "elapsed": elapsed}, buffer)
        state_tmp = state_path.with_name(state_path.name + ".partial")
        try:
            state_tmp.write_bytes(buffer.getbuffer())
            fsync_path(state_tmp)
            save_model_folder(model, opts.tokenizer, out, opts.save_dtype, extra_config={"training": layout},
                              extra_files={"training.json": json.dumps(summary, indent=2, default=str) + "\n"})
            os.replace(state_tmp, state_path)
            fsync_path(state_path.parent)
        except (OSError, SafetensorError) as exc:   # safetensors reports a full disk as its own error
            state_tmp.unlink(missing_ok=True)
            kept = (f"it holds step {saved_step}" if saved_step is not None else
                    "it holds what it held before this run" if (out / "model.safetensors").is_file() else
                    "nothing was saved")
            raise CheckpointFailed(f"could not write the model folder {out} at step {base_steps + step} "
                                   f"({getattr(exc, 'strerror', None) or exc}): {kept}") from exc
        finally:
            # The folder was replaced: the log goes on in the new one (a hard link carried it
            # over; a copy would leave this handle writing into the old, removed file).
            if log_fh is not None:
                log_fh.close()
                log_fh = open(log_path, "a", encoding="utf-8")
        saved_step = base_steps + step
        return True

    # SIGTERM (a time box ending, a lease given back) and a first SIGINT (Ctrl-C) stop at the next
    # step and save the folder; SIGINT raised KeyboardInterrupt wherever the loop was, so the steps
    # since the last save were lost. A second Ctrl-C interrupts at once (the folder on disk stays
    # whole: it is written beside itself and renamed into place).
    stop = threading.Event()
    stopped_by: list[str] = []

    def on_signal(signum, frame) -> None:
        if signum == signal.SIGINT and stop.is_set():
            raise KeyboardInterrupt
        stopped_by.append(signal.Signals(signum).name)
        stop.set()
    previous_handlers = {}
    if threading.current_thread() is threading.main_thread():
        previous_handlers = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        model.train()
        diverged = weights_broken = False
        saved_step: int | None = None    # the step the folder holds, written by this run
        while not stop.is_set():
            elapsed = elapsed_before + time.time() - t_start
            progress = max(step / opts.max_steps if opts.max_steps else 0.0,
                           elapsed / (opts.minutes * 60) if opts.minutes else 0.0)
            if progress >= 1.0:
                break
            lr = lr_at(progress, step, opts)
            for group in optim.param_groups:
                group["lr"] = lr
            waited = time.perf_counter()
            batch = next(loader)
            data_wait += time.perf_counter() - waited
            ids, is_span, ar = (x.to(device, non_blocking=True) for x in batch)
            try:
                losses = loss_and_grads(step_model, ids, is_span, ar)
            except Exception as exc:
                if out_of_memory(exc):
                    # It was a traceback. The first step is where a preset too big for the device
                    # shows: the run is refused, and the folder left as it was (nothing recorded yet).
                    kept = ("nothing was trained" if not stepped else
                            f"{out} holds step {saved_step}" if saved_step is not None else "nothing was saved")
                    raise ValueError(f"out of memory on {hardware(device)} at step {base_steps + step + 1} "
                                     f"({one_line(exc)[:200]}): a smaller --batch-size, --seq-len or --preset; "
                                     f"{kept}") from None
                if step_model is model or stepped:
                    raise
                # The first compiled step compiles forward and backward. A compiler that fails there
                # (a toolchain or torch version the run never met) must not cost the run: it goes on
                # eager, with the SDPA attention (flex is only fast compiled).
                # Dynamo's first line only names the backend; the cause follows it.
                compile_failed = " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
                log(f"torch.compile failed ({compile_failed}); training goes on without it")
                step_model = model
                model.training_attention = "mask"
                losses = loss_and_grads(model, ids, is_span, ar)
            stepped = True
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            # A NaN or infinite loss or gradient (a bad batch, a spike) would turn every weight NaN
            # for good; such a step is not applied. The check waits for the step's backward (one
            # sync a step, a launch gap against steps of ~100 ms on a GPU). Many in a row mean the
            # run has diverged: it stops, keeping the weights of its last good step.
            if not bool(torch.isfinite(grad_norm) & torch.isfinite(losses["loss"].detach())):
                skipped += 1
                skipped_in_a_row += 1
                log(f"step {base_steps + step + 1}: the loss or gradient is not finite; step skipped ({skipped} so far)")
                if skipped_in_a_row >= MAX_SKIPPED_IN_A_ROW:
                    log(f"{skipped_in_a_row} steps in a row were not finite: training has diverged and stops here "
                        f"(lower --lr, or resume from the saved folder)")
                    diverged = True
                    break
                continue
            skipped_in_a_row = 0
            optim.step()
            step += 1
            tokens += ids.numel()
            if step % 10 == 0 or step == 1:
                rec = {"step": base_steps + step, "tokens": base_tokens + tokens,
                       "elapsed_s": round(base_seconds + elapsed, 1), "lr": lr,
                       "grad_norm": round(float(grad_norm), 3),
                       "data_wait": round(data_wait_share(), 3),
                       **{k: round(float(v.detach()), 4) for k, v in losses.items()}}
                record(rec)
                if step % 50 == 0 or step == 1:
                    log(json.dumps(rec))
            if step % opts.eval_every == 0:
                last_val = validate(model, val_batches, opts, device, autocast)
                rec = {"step": base_steps + step, "tokens": base_tokens + tokens,
                       "elapsed_s": round(base_seconds + elapsed, 1), **{k: round(v, 4) for k, v in last_val.items()}}
                record(rec)
                log(json.dumps(rec))
                best_val = min(best_val, last_val["val_diffusion"])
            if step % opts.save_every == 0 or (opts.save_minutes and time.time() - last_save >= 60 * opts.save_minutes):
                if not checkpoint():
                    diverged = weights_broken = True
                    break
                last_save = time.time()
        last_val = validate(model, val_batches, opts, device, autocast)
        record({"step": base_steps + step, "tokens": base_tokens + tokens, **{k: round(v, 4) for k, v in last_val.items()}})
        if weights_broken or not checkpoint(final=True):
            diverged = True
    finally:
        if log_fh is not None:
            log_fh.close()
        # Also when a save fails or the loop raises: a caller's own handlers come back.
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
    ending = "diverged" if diverged else f"stopped ({stopped_by[0]})" if stopped_by else "done"
    log(f"{ending}: {step} steps, {tokens} tokens, {last_val}")
    if diverged:
        kept = (f"{out} holds step {saved_step}" if saved_step is not None else
                f"{out} holds what it held before this run" if (out / "model.safetensors").is_file() else
                "nothing was saved")
        raise TrainingDiverged(f"training diverged (its loss, gradients or weights went NaN or infinite): {kept}; "
                               "lower --lr, or continue from the saved folder")
    if data_wait_share() > 0.1 and device.type == "cuda":
        log(f"the training steps waited for batches {100 * data_wait_share():.0f}% of the time: more --workers "
            "(dllm-lsp bench training-data says how many) would have trained faster")
    return json.loads((out / "training.json").read_text())

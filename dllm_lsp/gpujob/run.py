"""`dllm-lsp gpujob run`: the phases of the GPU job, in priority order, within --minutes.

Every phase writes into the job folder as it goes, and job.json is rewritten after every step,
so a job stopped at any point (the lease ends, the machine is taken back) leaves what it had:
a correctness report first, then a loadable model folder every few minutes, then evaluations
and benchmark JSONs one by one, and finally the pack (at most 8 files) to bring home.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from dllm_lsp.bench.environment import environment
from dllm_lsp.cpus import usable_cpus
from dllm_lsp.engine.denoise import RUN_STATE_ENV
from dllm_lsp.eval.tasks import FILES as EVAL_FILES
from dllm_lsp.loader import ModelLoadError, default_model_path, resolve_device
from dllm_lsp.train.whole_folder import recover_model_folder
from dllm_lsp.train.presets import MODEL_KEYS, preset

from .budget import PHASES, Budget
from .children import ChildResult, dllm_command, end_group, is_dllm_process, run_child
from .pack import model_problem, pack_job

HURRY_SIGNAL = signal.SIGUSR1   # "pack now": Job.hurry
EVALS = ("single-line", "random-span-light")
# Of the eval box left when it starts, the share a run's infilling may take (`eval --max-seconds`:
# it scores what it infilled by then, tasks spread over the file): single-line leaves random-span-light
# the rest; the others may take all that is left. EVAL_OVERHEAD_S: the child's start, the model's
# load and the execution of the programs, outside --max-seconds (the H200 lease's single-line run,
# 3 x 1033 tasks, filled its whole 118 s box and left no figure: that is what this prevents).
EVAL_SHARE = {"single-line": 0.6}
EVAL_OVERHEAD_S = 40.0
# Each benchmark with the span length unknown and oracle, and as an editor meets it (the task
# opened as a file, completed at the cursor by the planner and post-processing: what users get).
EVAL_MODES = ("--modes", "unknown,oracle,editor")
# After them, in what the eval box has left: the decode rules the CPU preview could not settle,
# on the GPU's model (name -> benchmark, extra `eval` arguments). docs/eval.md#ends-only-where-balanced
ABLATIONS = {"single-line-ends-balanced": ("single-line", ("--ends-balanced", "--modes", "unknown")),
             # The cursor inside a word, as most keystrokes leave it (the typed word healed): eval.md
             "single-line-editor-typed-2": ("single-line", ("--modes", "editor", "--typed", "2")),
             # companionEdits is off because it cost the CPU preview; does the GPU's model gain from it?
             "single-line-editor-companion": ("single-line", ("--modes", "editor", "--companion-edits")),
             # The cursor just after a bracket, dot, operator or quote (the last typed token healed): eval.md
             "single-line-editor-typed-through": ("single-line", ("--modes", "editor",
                                                                  "--typed-through", "([{.=,\"'"))}


CONTINUED_WARMUP = 100     # warmup steps of a run that continues a model (Job.continued_warmup)


@dataclass(frozen=True)
class BenchItem:
    name: str
    estimate_s: float        # expected duration on an H100 (measured durations are in job.json)
    quick_estimate_s: float  # the same with --quick on a CPU (the dry run)
    needs_model: bool = False   # runs the job's trained model (skipped without one)
    # A key the figure's JSON must hold for a past lease's file to count as this figure: a file
    # from before the benchmark measured it (the latency JSON before `--profile`) is still missing.
    holds: str | None = None


# Priority order. A benchmark runs whole or not at all: it starts only if its estimate fits.
BENCHES = (
    # Estimates from the H200 lease of 2026-11-26 where one ran (docs/results/gpu-job/20261126-0024):
    # kernels without the step 34 s, checkpoint without the shared step 30 s, latency 22 s,
    # batching 16 s (each a fresh process: imports, CUDA start, Triton compiles), with some margin.
    # The Dream-7B-shaped step against the weight-read bound (issue 11's last unmeasured target).
    BenchItem("kernels", 120.0, 25.0),
    # People typing through the real server on the GPU: batched, serial, no prefix reuse (issue 13, open
    # on these figures alone). Never in a dry run (its own test covers the code path): four servers'
    # start-ups cost more than a box.
    BenchItem("typing", 240.0, float("inf"), needs_model=True),
    # With the shared step of 1-16 requests and the kept context (issue 13), and on CUDA the cached
    # steps and the autoregressive tokens replayed from CUDA graphs (issue 11's step bound: the eager
    # step was launch-bound at 4.8x), its shared step against replayed steps in turn.
    BenchItem("checkpoint", 150.0, 25.0, holds="cuda_graphs"),
    # With `--profile` (where a completion's time goes on the GPU: launches, syncs, Python; the 32M
    # model's step cost ~6 ms on the H200, far above its arithmetic) and, on CUDA, every case also
    # with CUDA-graph steps beside the eager one (engine/cuda_graph.py).
    BenchItem("latency", 60.0, 20.0, needs_model=True, holds="profile"),
    # What a shared denoising step buys on this GPU with the trained model (issue 13).
    BenchItem("batching", 30.0, 10.0, needs_model=True),
    # SDAR-8B-shaped block diffusion vs AR (issue 15), and the shared block step of 1-16 requests (issue 13).
    BenchItem("block", 170.0, 20.0),
    # What the load-time warm-up saves the first completion on this GPU (the Triton kernels' first
    # launch). Never in a dry run, as typing: ten server start-ups; its own test covers it.
    BenchItem("startup", 100.0, float("inf"), needs_model=True),
    # The typing replay with the server's steady steps replayed from CUDA graphs beside eager ones
    # (serving.md#steady-steps-from-a-cuda-graph: does the step scheduler still share well?). Last: it
    # decides a default once `bench --profile` has shown graphs worth it. Never in a dry run, as typing.
    BenchItem("typing-graphs", 170.0, float("inf"), needs_model=True),
)


@dataclass
class JobOptions:
    out: Path
    minutes: float
    device: str = "cuda"
    preset: str = "gpu-30m"
    init: str = "auto"                   # auto | fresh | a model folder to continue
    model_name: str | None = None        # None: the --init folder's name in a job that does not train,
                                         # else DEFAULT_MODEL_NAME
    data: Path | None = None             # HumanEval-Infilling folder (eval and decontamination)
    corpus_folders: list[Path] = field(default_factory=list)   # empty: this Python's stdlib + site-packages
    corpus_license: str | None = None    # SPDX license of plain corpus folders (--assume-license)
    corpus_max_mb: float | None = 1500.0
    tokenizer_sample_mb: float = 150.0
    eval_limit: int | None = None
    quick: bool = False                  # the dry run: tiny shapes, quick benchmarks, small evals
    drill_fail: str | None = None        # rehearse a failing kernel in the check phase
    train_args: list[str] = field(default_factory=list)   # extra `dllm-lsp train model` arguments
    save_minutes: float = 3.0
    bench_estimates: dict[str, float] = field(default_factory=dict)   # override BENCHES estimates
    phases: tuple[str, ...] = PHASES     # the phases to run (pack always): `--phases`
    repo: Path = Path(".")               # the checkout the job runs in: which GPU figures it already has

    def to_json(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else [str(p) for p in v] if k == "corpus_folders"
                    else list(v) if isinstance(v, tuple) else v)
                for k, v in asdict(self).items()}


DEFAULT_MODEL_NAME = "dllm-embedded-30m"   # the gpu-30m preset's model in models/


def job_model_name(opts: JobOptions) -> str:
    """The job's model folder name, which the pack brings home to models/NAME. A job that trains
    writes the preset's model (`--model-name`, default DEFAULT_MODEL_NAME). A job that only
    evaluates and benchmarks the folder `--init` names keeps that folder's name: under the default
    name, an `--init models/dllm-embedded-3m-cpu-preview` would be unpacked over the 30M model."""
    if opts.model_name:
        return opts.model_name
    if "train" not in opts.phases and opts.init not in ("auto", "fresh"):
        return Path(opts.init).resolve().name
    return DEFAULT_MODEL_NAME


class Job:
    def __init__(self, opts: JobOptions, log: TextIO | None = None) -> None:
        self.opts = opts
        self.out = Path(opts.out)
        self.budget = Budget(opts.minutes, phases=opts.phases)
        if self.out.is_dir() and any(self.out.iterdir()):
            # An earlier job's results, check and model would be packed as this job's, dated
            # today, and unpacked into docs/ as fresh GPU figures.
            raise ValueError(f"--out {self.out} is not empty (an earlier job?): give the job a new folder")
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = log or open(self.out / "job.log", "a", encoding="utf-8", buffering=1)
        self.disabled: list[str] = []
        self.run_state: str | None = None    # "device": the check found the host layout failing here
        self.state = {
            "job": "dllm-lsp GPU job", "started": now(), "finished": None, "options": opts.to_json(),
            "host": platform.node(), "environment": environment(opts.device), "phases": {},
            "disabled_kernels": self.disabled,
            "pid": os.getpid(),   # `gpujob wait --pack-by` signals it (HURRY_SIGNAL) to pack now
        }
        self.model_name = self.state["model_name"] = job_model_name(opts)
        self.model_dir = self.out / "model" / self.model_name
        self.continue_from: Path | None = None
        self.tokenizer: Path | None = None

    # ---- bookkeeping -------------------------------------------------------------------
    def say(self, message: str) -> None:
        line = f"[job {self.budget.elapsed():7.1f}s] {message}"
        self.log.write(line + "\n")
        self.log.flush()
        print(line, flush=True)

    def save_state(self) -> None:
        write_state(self.out, self.state)

    def phase(self, name: str) -> dict:
        return self.state["phases"].setdefault(name, {"state": "pending", "steps": []})

    def record(self, name: str, step: str, result: ChildResult | None, **extra) -> None:
        entry = {"step": step, **extra}
        if result is not None:
            entry.update(rc=result.rc, seconds=round(result.seconds, 1), timed_out=result.timed_out)
            if not result.ok:
                entry["tail"] = result.tail[-8:]
        self.phase(name)["steps"].append(entry)
        self.save_state()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        if self.disabled:
            env["DLLM_LSP_DISABLE_KERNELS"] = ",".join(self.disabled)
        if self.run_state:
            env[RUN_STATE_ENV] = self.run_state
        if self.opts.device == "cpu":
            env.setdefault("TRITON_INTERPRET", "1")   # the dry run checks the kernels in the interpreter
        return env

    def child(self, phase: str, step: str, args: list[str], timeout_s: float, raw: bool = False,
              **extra) -> ChildResult:
        cmd = args if raw else dllm_command(*args)
        result = run_child(f"{phase}/{step}", cmd, timeout_s, self.log, self.env(),
                           stop_early=lambda: self.budget.hurried, started_as=self.child_started)
        self.state.pop("child", None)
        self.record(phase, step, result, **extra)
        return result

    def child_started(self, pid: int) -> None:
        # If the job dies, `gpujob wait` ends this step's process group (salvage): in its own
        # session, it would otherwise outlive the job and run on past every box.
        self.state["child"] = {"pid": pid, "since_s": round(self.budget.elapsed(), 1)}
        self.save_state()

    # ---- the job -------------------------------------------------------------------------
    def hurry(self, *_signal) -> None:
        """Pack now (HURRY_SIGNAL, from `gpujob wait --pack-by`: the lease is running out): the
        running child is ended as its time box would end it (training saves its folder), every
        later phase but pack is skipped, and pack writes what there is."""
        if not self.budget.hurried:
            self.budget.hurried = True
            self.state["hurried_at_s"] = round(self.budget.elapsed(), 1)

    def run(self) -> dict:
        self.say(f"GPU job: {self.opts.minutes:g} minutes on {self.opts.device}, output in {self.out}")
        try:
            before = signal.signal(HURRY_SIGNAL, self.hurry)
        except ValueError:   # not the main thread (a test driving Job directly): no signal, no hurry
            before = None
        try:
            return self.run_phases()
        finally:
            if before is not None:
                signal.signal(HURRY_SIGNAL, before)

    def out_of_time(self, why: str = "no time left") -> str:
        """Why a phase or step gets no time: the budget ran out, or `gpujob wait --pack-by` said pack now."""
        return "told to pack now" if self.budget.hurried else why

    def run_phases(self) -> dict:
        self.save_state()
        if "train" not in self.opts.phases:
            self.use_existing_model()
        for name, body in (("check", self.check), ("corpus", self.corpus), ("train", self.train),
                           ("eval", self.evaluate), ("bench", self.bench), ("pack", self.pack)):
            if name not in self.opts.phases:
                self.phase(name).update(state="not_selected", why="not in --phases")
                continue
            box = self.budget.box(name)
            entry = self.phase(name)
            entry.update(box_s=round(box, 1), started_at_s=round(self.budget.elapsed(), 1))
            if box < 5 and name != "pack":
                why = self.out_of_time(f"no time left ({box:.0f} s in its box)")
                entry.update(state="skipped", why=why)
                self.say(f"{name}: skipped, {why}")
                self.save_state()
                continue
            self.say(f"{name}: box {box:.0f} s, {self.budget.remaining():.0f} s left in the job")
            entry["state"] = "running"
            self.save_state()
            started = time.monotonic()
            try:
                entry["state"] = body(max(box, 5.0)) or "done"
            except Exception as exc:   # a bug in the job itself must not cost the later phases
                entry.update(state="failed", error=f"{type(exc).__name__}: {exc}")
                self.say(f"{name}: failed: {exc}")
            entry["seconds"] = round(time.monotonic() - started, 1)
            self.save_state()
        self.state["finished"] = now()
        self.save_state()
        self.say("done: " + ", ".join(f"{k} {v['state']}" for k, v in self.state["phases"].items()))
        return self.state

    def check(self, box: float) -> str:
        report = self.out / "check" / "cuda-check.json"
        args = [sys.executable, "-m", "dllm_lsp.gpujob.check", "--device", self.opts.device, "--out", str(report)]
        if self.opts.quick:
            args.append("--quick")
        if self.opts.drill_fail:
            args += ["--drill-fail", self.opts.drill_fail]
        result = self.child("check", "kernels+engine", args, box, raw=True)
        if not report.is_file():
            return "failed" if result.ok or not result.timed_out else "timed_out"
        data = json.loads(report.read_text())
        for kernel in data.get("kernels", {}).get("failed_kernels", []):
            if kernel not in self.disabled:
                self.disabled.append(kernel)
        if self.disabled:
            self.say(f"check: kernels failing on this device, disabled from now on: {', '.join(self.disabled)}")
        if data.get("run_state_fallback"):
            # The decode runs failed with their state on the host and ran with it on the device: the
            # benchmarks still measure, in the layout before (engine/denoise.py state_device).
            self.run_state = self.state["run_state"] = data["run_state_fallback"]
            self.say(f"check: decode runs fail here with their state on the host; {RUN_STATE_ENV}="
                     f"{self.run_state} from now on")
        self.phase("check")["summary"] = {
            "kernels": {k: v for k, v in data.get("kernels", {}).items() if k != "cases"},
            "engine": [{k: row.get(k) for k in ("model", "ok", "agree", "error")} for row in data.get("engine", [])],
        }
        engine_ok = all(row.get("ok") for row in data.get("engine", []))
        return "done" if engine_ok and not self.disabled else "done_with_failures"

    def resolve_init(self) -> Path | None:
        if self.opts.init == "fresh":
            return None
        if self.opts.init != "auto":
            folder = Path(self.opts.init)
            if not (folder / "config.json").is_file():
                raise ValueError(f"--init {folder}: not a model folder")
            return folder
        try:
            shipped = default_model_path(resolve_device(self.opts.device).type)
        except ModelLoadError:
            return None
        config = json.loads((shipped / "config.json").read_text())
        want = preset(self.opts.preset)
        same = all(config.get(k) == want[k] for k in MODEL_KEYS if k != "vocab_size")
        return shipped if same else None   # the shipped model continues only if it is this preset's size

    def continued_warmup(self) -> list[str]:
        """A continued model's warmup: CONTINUED_WARMUP steps at most (unless --train-arg names one).
        The optimizer's state is not shipped (twice the weights in fp32), so each lease starts a
        fresh AdamW and warms it up again; the preset's warmup is sized for random weights (500
        steps of gpu-30m: a quarter of a four-minute lease's steps at a reduced rate), while a
        fresh optimizer's moments settle within a few dozen steps (beta2 0.95)."""
        if any(arg == "--warmup" or arg.startswith("--warmup=") for arg in self.opts.train_args):
            return []
        return ["--warmup", str(min(preset(self.opts.preset)["warmup"], CONTINUED_WARMUP))]

    def use_existing_model(self) -> None:
        """A job that does not train evaluates and benchmarks the model `--init` names (auto: the
        shipped one, when it is this preset's size): a copy of it becomes the job's model folder,
        so new evaluations go beside it and the pack brings it home with them."""
        source = self.resolve_init()
        self.continue_from = source
        if source is None:
            self.say("no model of this preset to evaluate or benchmark (--init): those steps will skip")
            return
        self.model_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, self.model_dir, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.py"))
        self.state["model_from"] = str(source)
        self.say(f"not training: evaluating and benchmarking {source}")

    def decontamination(self) -> list[Path]:
        folder = self.opts.data
        files = sorted(folder.glob("*.jsonl*")) if folder and folder.is_dir() else []
        if not files:
            raise ValueError("no HumanEval-Infilling files to keep out of the corpus: pass --data FOLDER "
                             "(the benchmark must never be trained on)")
        return files

    def corpus(self, box: float) -> str:
        self.continue_from = self.resolve_init()
        self.phase("corpus")["continue_from"] = str(self.continue_from) if self.continue_from else None
        corpus = self.out / "corpus"
        args = ["train", "corpus", "--out", str(corpus), "--max-seconds", f"{0.6 * box:.0f}"]
        if self.opts.corpus_max_mb:
            args += ["--max-mb", str(self.opts.corpus_max_mb)]
        for folder in self.opts.corpus_folders:
            args += ["--folder", str(folder)]
        if self.opts.corpus_license:
            args += ["--assume-license", self.opts.corpus_license]
        for file in self.decontamination():
            args += ["--decontaminate", str(file)]
        built = self.child("corpus", "corpus", args, box)
        if not (corpus / "train.jsonl").is_file() or not built.ok:
            return "failed"
        stats = json.loads((corpus / "stats.json").read_text())
        self.phase("corpus")["summary"] = {k: stats.get(k) for k in ("files_seen", "files_per_second",
                                                                       "mb_read_per_second", "workers", "seconds")}
        self.phase("corpus")["summary"]["train_mb"] = round(stats["train"]["bytes"] / 1e6, 1)
        if self.continue_from is not None:
            self.tokenizer = self.continue_from / "tokenizer.json"
            return "done"
        tokenizer = self.out / "tokenizer.json"
        vocab = preset(self.opts.preset)["vocab_size"]
        trained = self.child("corpus", "tokenizer", ["train", "tokenizer", "--corpus", str(corpus), "--out",
                                                     str(tokenizer), "--vocab-size", str(vocab), "--sample-mb",
                                                     str(self.opts.tokenizer_sample_mb), "--no-count"],
                             max(self.budget.box("corpus"), 30.0))
        if not trained.ok or not tokenizer.is_file():
            return "failed"
        self.tokenizer = tokenizer
        return "done"

    def train(self, box: float) -> str:
        if self.tokenizer is None:
            return "skipped"
        cuda = self.opts.device.startswith("cuda")
        # The loop's own clock starts after the model and the data are ready and it validates and
        # saves after it: leave that margin inside the box, so it ends itself and anneals properly.
        margin = min(120.0, 0.25 * box) if cuda else min(15.0, 0.3 * box)
        minutes = max((box - margin) / 60.0, 0.05)
        args = ["train", "model", "--corpus", str(self.out / "corpus"), "--tokenizer", str(self.tokenizer),
                "--out", str(self.model_dir), "--preset", self.opts.preset, "--minutes", f"{minutes:.3f}",
                "--device", self.opts.device, "--save-dtype", "int8", "--save-minutes", str(self.opts.save_minutes)]
        if cuda:
            # One core for the loop itself, one for the rest; every other core builds batches
            # (dllm-lsp bench training-data: one core feeds ~3 gpu-30m steps a second).
            args += ["--compile", "--workers", str(max(1, usable_cpus() - 2))]
        else:
            args += ["--threads", "1", "--eval-every", "20"]
        if self.continue_from is not None:
            args += ["--init-from", str(self.continue_from), *self.continued_warmup()]
        result = self.child("train", "train", args + self.opts.train_args, box, minutes=round(minutes, 2))
        if not (self.model_dir / "model.safetensors").is_file():
            return "failed"
        summary = json.loads((self.model_dir / "training.json").read_text())
        self.phase("train")["summary"] = {k: summary.get(k) for k in ("parameters", "steps", "tokens", "seconds",
                                                                       "hardware", "val_diffusion", "val_ar",
                                                                       "data_wait_share", "compile",
                                                                       "compile_failed", "skipped_steps",
                                                                       "diverged")}
        if summary.get("diverged"):
            return "diverged"    # its folder holds the last good step's weights, which go on to eval
        if result.timed_out:
            return "timed_out"   # the folder saved last is still a loadable model
        return "done" if result.ok else "failed"

    def evaluate(self, box: float) -> str:
        if not (self.model_dir / "model.safetensors").is_file():
            return "skipped"
        if self.opts.data is None:
            self.phase("eval")["why"] = "no --data folder"
            return "skipped"
        states = []
        runs = [(name, name, EVAL_MODES) for name in EVALS] + [(name, bench, extra) for name, (bench, extra) in ABLATIONS.items()]
        for name, bench, extra in runs:
            left = self.budget.box("eval")
            data = self.opts.data / EVAL_FILES[bench]
            if left < 10 or not data.is_file():
                why = self.out_of_time() if left < 10 else f"{data} not found"
                self.record("eval", name, None, state="skipped", why=why)
                if name in EVALS:                # an ablation is extra: the phase is not "partial" without it
                    states.append("skipped")
                continue
            args = ["eval", "humaneval-infilling", "--data", str(data), "--model", str(self.model_dir),
                    "--device", self.opts.device, "--json", "--out", str(self.model_dir / f"eval-{name}.json"),
                    "--workers", str(max(2, min(8, usable_cpus() // 2))),
                    "--threads", "1" if self.opts.device == "cpu" else "4", *extra]
            if self.opts.eval_limit:
                args += ["--limit", str(self.opts.eval_limit)]
            infill_s = max(5.0, left * EVAL_SHARE.get(name, 1.0) - EVAL_OVERHEAD_S)
            args += ["--max-seconds", f"{infill_s:.0f}"]
            result = self.child("eval", name, args, left)
            if name in EVALS:
                states.append("done" if result.ok else "timed_out" if result.timed_out else "failed")
            if result.ok and result.tail:
                try:
                    self.phase("eval").setdefault("summary", {})[name] = {
                        k: v for k, v in json.loads(result.tail[-1]).items()
                        if k in ("pass@1", "length_gap_points", "stopped_by_time")}
                    editor = json.loads(result.tail[-1])["modes"].get("editor")
                    if editor:
                        # How well the trained model's confidence tells passing from failing lines:
                        # what a `minConfidence` default would be chosen from (eval.md).
                        auroc = (editor.get("confidence") or {}).get("auroc_mean")
                        self.phase("eval")["summary"][name]["editor"] = {
                            **{k: editor[k] for k in ("pass@1", "shown")}, "confidence_auroc": auroc}
                except ValueError:
                    pass
        return "done" if all(s == "done" for s in states) else "partial"

    def bench_tag(self) -> str:
        gpu = self.state["environment"].get("gpu") or ""
        for tag in ("H200", "H100", "A100", "L40S", "L4"):
            if tag in gpu:
                return tag.lower()
        return "cpu" if self.opts.device == "cpu" else "gpu"

    def bench_file(self, item: BenchItem, tag: str) -> str:
        return f"latency-{tag}-{self.model_name}.json" if item.name == "latency" else f"{item.name}-{tag}.json"

    def repo_has(self, item: BenchItem, tag: str) -> bool:
        """Whether the checkout has this figure for this kind of GPU (holding `item.holds`, if named)."""
        path = Path(self.opts.repo) / "docs" / "results" / self.bench_file(item, tag)
        if not path.is_file():
            return False
        if item.holds is None:
            return True
        try:
            return item.holds in json.loads(path.read_text())
        except (OSError, ValueError):
            return False

    def bench_order(self, tag: str) -> list[BenchItem]:
        """BENCHES in priority order, except that a figure the repository already has from this kind
        of GPU (a past lease's, in docs/results/) goes after those it lacks: each lease fills gaps
        first, and a bench box too short for all of them still ends up covering all over leases."""
        have = {item.name for item in BENCHES if self.repo_has(item, tag)}
        if have:
            self.phase("bench")["already_in_repo"] = sorted(have)
        return sorted(BENCHES, key=lambda item: item.name in have)   # stable: priority order within each

    def bench(self, box: float) -> str:
        results = self.out / "results"
        results.mkdir(exist_ok=True)
        tag, states = self.bench_tag(), []
        for item in self.bench_order(tag):
            estimate = self.opts.bench_estimates.get(item.name,
                                                     item.quick_estimate_s if self.opts.quick else item.estimate_s)
            left = self.budget.box("bench")
            if estimate > left:
                why = self.out_of_time(f"estimated {estimate:.0f} s, {left:.0f} s left: never started to be cut short")
                self.record("bench", item.name, None, state="skipped", why=why)
                states.append("skipped")
                continue
            if item.needs_model and not (self.model_dir / "model.safetensors").is_file():
                self.record("bench", item.name, None, state="skipped", why="no trained model")
                states.append("skipped")
                continue
            out = results / self.bench_file(item, tag)
            args = self.bench_args(item, out)
            result = self.child("bench", item.name, args, left, estimate_s=estimate)
            states.append("done" if result.ok and out.is_file() else "failed")
        return "done" if all(s == "done" for s in states) else "partial"

    def bench_args(self, item: BenchItem, out: Path) -> list[str]:
        """The `dllm-lsp` command line of one benchmark of the bench phase, writing `out`."""
        device, quick, model = self.opts.device, self.opts.quick, str(self.model_dir)
        if item.name == "kernels":
            return ["bench", "kernels", "--device", device, "--out", str(out), "--quick" if quick else "--profile"]
        if item.name in ("typing", "typing-graphs"):
            variants = (["batched=", "serial=--no-batching", "no-prefix-reuse=--prefix-cache 0"]
                        if item.name == "typing" else ["batched=", "cuda-graphs=--cuda-graphs"])
            return ["bench", "typing", "--clients", "1,4", "--keystrokes", "40", "--model", model, "--device", device,
                    *(arg for v in variants for arg in ("--serve-variant", v)),
                    "--out", str(out), "--plot", str(out.with_suffix(".png"))]
        if item.name == "batching":
            return ["bench", "batching", "--model", model, "--device", device, "--out", str(out),
                    *(["--runs", "3", "--requests", "1,2"] if quick else ["--requests", "1,2,4,8,16"])]
        if item.name == "startup":
            return ["bench", "startup", "--model", model, "--device", device, "--runs", "4", "--out", str(out)]
        if item.name in ("block", "checkpoint"):
            return ["bench", item.name, "--device", device, "--out", str(out),
                    *(["--profile"] if item.name == "checkpoint" else []), *(["--quick"] if quick else [])]
        # latency: every case (with and without CUDA-graph steps on CUDA) and where its time goes
        return ["bench", "--model", model, "--device", device, "--out", str(out),
                "--runs", "5" if quick else "30", "--profile"]

    def pack(self, box: float) -> str:
        notes = {}
        if (self.model_dir / "model.safetensors").is_file():   # the card draws the loss curve beside it
            card = self.child("pack", "card", self.card_args(), max(min(box / 2, 60.0), 10.0))
            if not card.ok:
                notes["card"] = "the model card could not be written"
        shutil.copyfile(self.out / "job.log", self.out / "job-log.txt") if (self.out / "job.log").is_file() else None
        self.phase("pack")["notes"] = notes
        self.state["finished"] = now()   # the packed job.json is the final record
        self.phase("pack")["state"] = "packing"
        self.save_state()
        manifest = pack_job(self.out, self.model_dir, self.out / "pack", require_model=True)
        self.phase("pack")["files"] = [f["name"] for f in manifest["parts"]]
        if manifest.get("model_left_out"):
            self.phase("pack")["model_left_out"] = manifest["model_left_out"]
        return "done"

    def card_args(self) -> list[str]:
        device = self.state["environment"].get("gpu") or self.opts.device
        if "train" in self.opts.phases:
            origin = f"continued from {self.continue_from.name}" if self.continue_from else "trained from scratch"
            run = (f"Trained by the dllm-lsp GPU job (`dllm-lsp gpujob run --minutes {self.opts.minutes:g}`), "
                   f"device {device}; {origin}.")
        else:
            run = (f"Evaluated again, not trained, by the dllm-lsp GPU job (`dllm-lsp gpujob run --phases "
                   f"{','.join(self.opts.phases)}`), device {device}; `training.json` records its training.")
        return card_args(self.out, self.model_dir, self.model_name, run + " " + INT8_NOTE)


INT8_NOTE = "Weights are stored as int8 with one fp32 scale per row (dllm_lsp/arch/weight_storage.py)."


def card_args(out: Path, model_dir: Path, title: str, closing_text: str) -> list[str]:
    """`dllm-lsp train card` for the job's model folder, with the job's corpus and evaluations and
    `closing_text` (how the job made the folder) at the end."""
    args = ["train", "card", "--model", str(model_dir), "--title", title]
    if (out / "corpus" / "stats.json").is_file():   # else the folder's own corpus_stats.json
        args += ["--corpus", str(out / "corpus")]
    for name in EVALS:
        path = model_dir / f"eval-{name}.json"
        if path.is_file():
            args += ["--eval", str(path)]
    closing = out / "card-closing.md"
    closing.write_text(closing_text + "\n")
    return args + ["--closing", str(closing)]


def salvaged_card(out: Path, model_dir: Path, state: dict) -> str:
    """The MODEL_CARD.md of a salvaged pack, written from what the dead job left (the folder's last
    save: training.json, train_log.jsonl; the job's evaluations; job.json) and saying it was
    salvaged: the folder's card was the model's before the job (copied with it, or carried over
    by every save), and came home describing the previous model. Where `train card` cannot write
    it (no training.json, a record it cannot read) a short card says what is known. Returns how
    the card was written."""
    from_train = "train" in ((state.get("options") or {}).get("phases") or PHASES)
    phases = ", ".join(f"{name} {p.get('state')}" for name, p in state.get("phases", {}).items()
                       if p.get("state") not in (None, "not_selected"))
    device = (state.get("environment") or {}).get("gpu") or (state.get("options") or {}).get("device")
    if from_train:
        origin = (f"trained by the dllm-lsp GPU job on {device}"
                  + (f", continued from {Path(state['phases']['corpus']['continue_from']).name}"
                     if (state.get("phases", {}).get("corpus") or {}).get("continue_from") else "")
                  + ("; its training was cut short: the figures are those of the folder's last save"
                     if state.get("phases", {}).get("train", {}).get("state") == "killed" else ""))
    else:
        origin = (f"evaluated again, not trained, by the dllm-lsp GPU job on {device} "
                  f"(`training.json` records its training)")
    salvaged = (f"**Salvaged.** The GPU job (pid {state.get('pid')}, started {state.get('started')}) ended before "
                f"its pack was done; `gpujob wait` packed what it left and wrote this card from it. The model was "
                f"{origin}. The job's phases: {phases or 'none recorded'}.")
    (model_dir / "MODEL_CARD.md").unlink(missing_ok=True)    # never the previous model's card
    if (model_dir / "training.json").is_file():
        with open(out / "job.log", "a", encoding="utf-8") as log:
            done = run_child("salvage/card", dllm_command(*card_args(out, model_dir, model_dir.name,
                                                                     salvaged + " " + INT8_NOTE)),
                             60.0, log, {**os.environ, "PYTHONUNBUFFERED": "1"}, echo=False)
        if done.ok and (model_dir / "MODEL_CARD.md").is_file():
            return "written from the folder's training.json"
    known = [f"# {model_dir.name}", "", salvaged, ""]
    try:
        config = json.loads((model_dir / "config.json").read_text())
        known.append(f"- Model: `{config.get('model_type')}`, {config.get('n_layers')} layers, dim {config.get('dim')}, "
                     f"vocabulary {config.get('vocab_size')}.")
    except (OSError, ValueError, AttributeError):
        pass
    train = state.get("phases", {}).get("train", {}).get("summary") or {}
    if train:
        known.append("- Training as job.json recorded it: " + ", ".join(f"{k} {v}" for k, v in train.items()
                                                                         if v is not None) + ".")
    try:
        last = (model_dir / "train_log.jsonl").read_text().strip().splitlines()[-1]
        known.append(f"- The training log's last line: `{last[:300]}`.")
    except (OSError, IndexError):
        pass
    known += ["- No `training.json` to write a full card from: what is above is all that is known."
              if not (model_dir / "training.json").is_file() else
              "- `dllm-lsp train card` could not write the full card (job-log.txt, `salvage/card`).", ""]
    (model_dir / "MODEL_CARD.md").write_text("\n".join(known))
    return "what is known (no full card)"


def salvage(out: Path, state: dict) -> dict:
    """Pack what a job left that died before its pack was done (`gpujob wait` found its pid gone:
    killed, out of memory, a crash of the job itself, even while packing): its running step's
    process group is ended first (a trainer saves its folder), then everything finished so far
    is packed as the job would have (a model folder that does not load left out), and job.json
    says so (`salvaged`; the phases it was in `killed`). Returns the new state."""
    out = Path(out)
    child = state.get("child") or {}
    ended = None
    if child.get("pid") and is_dllm_process(int(child["pid"])):
        ended = end_group(int(child["pid"]))
    for phase in state.get("phases", {}).values():
        if phase.get("state") in ("running", "packing", "pending"):
            phase["state"] = "killed"
    state.pop("child", None)
    state["salvaged"] = {"at": now(), "by": "gpujob wait",
                         "why": f"the job (pid {state.get('pid')}) ended before its pack was done",
                         "running_step_ended": ended}
    model_dir = out / "model" / str(state.get("model_name") or DEFAULT_MODEL_NAME)
    recover_model_folder(model_dir)      # a save killed between its renames: its last whole folder
    if model_dir.is_dir() and model_problem(model_dir) is None:
        try:
            state["salvaged"]["card"] = salvaged_card(out, model_dir, state)
        except OSError as exc:       # the card must not cost the pack
            state["salvaged"]["card"] = f"not written: {exc}"
    if (out / "job.log").is_file():
        shutil.copyfile(out / "job.log", out / "job-log.txt")
    write_state(out, state)    # the packed job.json is the record of what happened
    manifest = pack_job(out, model_dir, out / "pack", require_model=True)
    state["phases"]["pack"] = {"state": "done", "salvaged": True, "files": [f["name"] for f in manifest["parts"]],
                               **({"model_left_out": manifest["model_left_out"]} if manifest.get("model_left_out") else {})}
    state["finished"] = state.get("finished") or now()
    write_state(out, state)
    return state


def write_state(out: Path, state: dict) -> None:
    tmp = Path(out) / "job.json.tmp"
    tmp.write_text(json.dumps(state, indent=1, default=str) + "\n")
    tmp.replace(Path(out) / "job.json")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")

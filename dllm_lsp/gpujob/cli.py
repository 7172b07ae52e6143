"""`dllm-lsp gpujob {stage,run,wait,unpack}`: the unattended GPU job (docs/gpu-job.md).

  stage   here, before a lease: copy the benchmark data and download the cp312 wheels the GPU
          machine lacks into .gpujob/ (ignored by git, carried to the machine)
  run     there: every phase in priority order within --minutes, into --out
  wait    there: follow a detached run for up to --max-seconds; when it has finished, copy the
          pack (at most 8 files) to --copy-to ($OUT); --pack-by S tells it to pack after S seconds
  unpack  here, after the lease: verify the pack and put its files into models/ and docs/
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from dllm_lsp.cli_errors import refuse_unknown_choice, report as report_error
from dllm_lsp.eval.tasks import default_data_dir
from dllm_lsp.kernels.dispatch import KERNEL_NAMES
from dllm_lsp.lifetime import process_alive

from .budget import PHASES, parse_phases
from .children import is_dllm_process
from .pack import unpack
from .run import HURRY_SIGNAL, Job, JobOptions, salvage

STAGE_DIR = ".gpujob"
# Packages the GPU image lacks (see the device notes): the LSP stack and the tree-sitter grammars.
# Some the image has, in versions that may be too old, since everything installs with --no-deps
# and --no-build-isolation (nothing to resolve against there): attrs and typing-extensions (cattrs
# wants attrs >= 25.4), and setuptools, this project's build backend (`license = "MIT"` in
# pyproject.toml needs setuptools >= 77: an older one fails `pip install -e .` on its metadata).
WHEELS = ("pygls", "lsprotocol", "cattrs", "attrs", "typing-extensions", "setuptools",
          "tree-sitter", "tree-sitter-python", "tree-sitter-javascript", "tree-sitter-typescript", "tree-sitter-rust",
          "tree-sitter-go", "tree-sitter-c", "tree-sitter-cpp", "tree-sitter-java", "tree-sitter-lua")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_5_x86_64", "any")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="dllm-lsp gpujob", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="run the job (on the GPU machine)")
    r.add_argument("--out", type=Path, required=True, help="job folder (created)")
    r.add_argument("--minutes", type=float, required=True, help="the whole job's time budget")
    r.add_argument("--device", default="cuda")
    r.add_argument("--preset", default="gpu-30m")
    r.add_argument("--init", default="auto",
                   help="auto (continue the shipped model when it is this preset's size), fresh, or a model folder")
    r.add_argument("--model-name", default=None,
                   help="the model folder's name in models/ (default: the --init folder's name in a job "
                        "without train, else dllm-embedded-30m)")
    r.add_argument("--data", type=Path, default=None,
                   help=f"HumanEval-Infilling folder (default: {STAGE_DIR}/data if present, else ../shared/eval/...)")
    r.add_argument("--folder", type=Path, action="append", default=[], help="corpus folder (default: this Python's)")
    r.add_argument("--corpus-license", default=None, help="SPDX license of plain --folder folders")
    r.add_argument("--corpus-max-mb", type=float, default=1500.0)
    r.add_argument("--tokenizer-sample-mb", type=float, default=150.0)
    r.add_argument("--eval-limit", type=int, default=None, help="tasks per benchmark (default: all)")
    r.add_argument("--save-minutes", type=float, default=3.0, help="write the model folder this often")
    r.add_argument("--quick", action="store_true", help="dry run sizes: tiny shapes, quick benchmarks")
    r.add_argument("--drill-fail", choices=KERNEL_NAMES, default=None, help="rehearse a kernel failing its check")
    r.add_argument("--bench-estimate", action="append", default=[], metavar="NAME=SECONDS",
                   help="override a benchmark's duration estimate (it runs only if the estimate fits)")
    r.add_argument("--train-arg", action="append", default=[], help="extra `dllm-lsp train model` argument")
    r.add_argument("--phases", default=None, metavar="LIST",
                   help=f"run only these phases, comma-separated, of {','.join(PHASES)} (pack always); "
                        "without train, the --init model is evaluated and benchmarked")
    r.add_argument("--repo", type=Path, default=Path("."),
                   help="the checkout: benchmarks whose GPU figures it already has run after the missing ones")
    w = sub.add_parser("wait", help="follow a detached run; copy its pack when finished")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--max-seconds", type=float, default=540.0)
    w.add_argument("--copy-to", type=Path, default=None)
    w.add_argument("--pack-by", type=float, default=None, metavar="S",
                   help="if the run has not finished after S seconds, tell it to pack now (it ends its running "
                        "step, skips the rest and packs what it has), so the pack is ready before --max-seconds")
    w.add_argument("--log", type=Path, default=None, metavar="FILE",
                   help="the file the detached run's own output goes to: its last lines are shown when the run "
                        "ended before it wrote job.json (an import error, a bad flag), and at --max-seconds")
    s = sub.add_parser("stage", help="prepare .gpujob/ (benchmark data, wheels) before a lease")
    s.add_argument("--repo", type=Path, default=Path("."))
    s.add_argument("--no-wheels", action="store_true")
    u = sub.add_parser("unpack", help="put a pack's files into the repository")
    u.add_argument("pack", type=Path)
    u.add_argument("--repo", type=Path, default=Path("."))
    u.add_argument("--make-default", action="store_true",
                   help="make the packed model the shipped default on CUDA devices (models/DEFAULT)")
    u.add_argument("--force", action="store_true",
                   help="overwrite or delete files with uncommitted changes (refused without it)")
    ap.commands = sub.choices      # name -> its parser, for refuse_unknown_choice
    return ap


def default_data() -> Path | None:
    for folder in (Path(STAGE_DIR) / "data", default_data_dir()):
        if folder.is_dir() and any(folder.glob("*.jsonl*")):
            return folder
    return None


def run(a) -> int:
    estimates = {}
    for spec in a.bench_estimate:
        name, _, seconds = spec.partition("=")
        estimates[name] = float(seconds)
    opts = JobOptions(out=a.out, minutes=a.minutes, device=a.device, preset=a.preset, init=a.init,
                      model_name=a.model_name, data=a.data or default_data(), corpus_folders=a.folder,
                      corpus_license=a.corpus_license, corpus_max_mb=a.corpus_max_mb,
                      tokenizer_sample_mb=a.tokenizer_sample_mb, eval_limit=a.eval_limit, quick=a.quick,
                      drill_fail=a.drill_fail, train_args=a.train_arg, save_minutes=a.save_minutes,
                      bench_estimates=estimates, phases=parse_phases(a.phases), repo=a.repo)
    state = Job(opts).run()
    return 0 if state["phases"].get("pack", {}).get("state") == "done" else 1


def wait(a) -> int:
    began = time.monotonic()
    deadline = began + a.max_seconds
    seen: dict[str, str] = {}
    told = False
    missing = 0    # polls in a row that found neither job.json nor the run's process
    while True:
        state = read_state(a.out)
        if state is None:
            missing = 0 if run_process(a.out) else missing + 1
            # Twice, a second apart: the run may be between its start and its first job.json (its
            # imports take seconds), but then its process is there.
            if missing >= 2:
                return ended_at_start(a)
        if (a.pack_by is not None and not told and state and not state.get("finished")
                and time.monotonic() - began >= a.pack_by and state.get("pid")
                and is_dllm_process(int(state["pid"]))):   # SIGUSR1 ends a process that does not handle it
            told = True
            try:
                os.kill(int(state["pid"]), HURRY_SIGNAL)
                print(f"told the run (pid {state['pid']}) to pack now", flush=True)
            except (OSError, ValueError) as exc:
                print(f"could not tell the run to pack: {exc}", flush=True)
        for name, phase in (state or {}).get("phases", {}).items():
            if seen.get(name) != phase.get("state"):
                seen[name] = phase.get("state")
                print(f"{name}: {phase.get('state')}", flush=True)
        if state and not packed(state) and state.get("pid") and not is_dllm_process(int(state["pid"])):
            state = read_state(a.out)     # it may have packed and ended since it was read
            if state and not packed(state):
                # Killed (the whole process group, out of memory, a crash of the job itself), perhaps
                # while packing: what it finished would otherwise wait here for nobody and never be copied.
                print(f"the run (pid {state['pid']}) is gone before its pack was done: packing what it left",
                      flush=True)
                try:
                    state = salvage(a.out, state)
                except (ValueError, OSError) as exc:
                    print(f"dllm-lsp gpujob: error: what the run left could not be packed: {exc}", file=sys.stderr)
                    return 1
        if packed(state):
            if a.copy_to:
                a.copy_to.mkdir(parents=True, exist_ok=True)
                for file in sorted((a.out / "pack").iterdir()):
                    shutil.copyfile(file, a.copy_to / file.name)
                print(f"pack copied to {a.copy_to}", flush=True)
            return 0
        if time.monotonic() >= deadline:
            log = a.out / "job.log"
            if log.is_file():
                print("".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:]), end="")
            elif a.log is not None:
                print(tail_of(a.log), end="")
            return 3   # still running
        time.sleep(1 if state is None else 5)


EXIT_LINE = "gpujob run: exit status "   # what the lease's launch line echoes after the run (docs/gpu-job.md)


def ended_at_start(a) -> int:
    """The run is gone and wrote no job.json: it ended at its start (an import error, a missing
    wheel, a bad flag, an --out that is not empty). Said at once, with its own output's last lines
    and its exit status where the launch recorded them, instead of waiting out --max-seconds for
    a job.json that will never come."""
    said = tail_of(a.log) if a.log is not None else ""
    status = next((line[len(EXIT_LINE):].strip() for line in reversed(said.splitlines())
                   if line.startswith(EXIT_LINE)), None)
    print(f"dllm-lsp gpujob: error: the run for {a.out} is not running and wrote no job.json: it ended at its "
          f"start (exit status {status if status is not None else 'unknown'})"
          + (f"; the last lines of {a.log}:" if said else
             f"; its own output ({a.log} is empty or missing)" if a.log is not None else
             "; its own output is where the run's stdout went (the lease's launch line: --log FILE shows it)"),
          file=sys.stderr, flush=True)
    if said:
        print(said, end="" if said.endswith("\n") else "\n", file=sys.stderr, flush=True)
    return 1


def tail_of(path: Path, lines: int = 25) -> str:
    try:
        return "".join(Path(path).read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""


def run_process(out: Path) -> int | None:
    """The pid of a live `dllm-lsp gpujob run` process whose --out is `out`, if any (None also
    where there is no /proc to ask: then the run is taken to be starting)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return 1
    want = Path(out).resolve()
    for cmdline in proc.glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        pid = int(cmdline.parent.name)
        if is_run_of(argv, want, cmdline.parent.name) and process_alive(pid):   # not a zombie
            return pid
    return None


def is_run_of(argv: list[str], out: Path, pid: str) -> bool:
    """Whether `argv` is a `gpujob run` with --out `out` (relative to that process's directory)."""
    for i in range(len(argv) - 1):
        if argv[i] == "gpujob" and argv[i + 1] == "run":
            break
    else:
        return False
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--out" and i + 1 < len(argv) else arg[6:] if arg.startswith("--out=") else None
        if value is not None:
            try:
                base = Path(os.readlink(f"/proc/{pid}/cwd"))
            except OSError:
                base = Path.cwd()
            return (base / value).resolve() == out
    return False


def packed(state: dict | None) -> bool:
    return bool(state and state.get("finished") and state["phases"].get("pack", {}).get("state") == "done")


def read_state(out: Path) -> dict | None:
    try:
        return json.loads((out / "job.json").read_text())
    except (OSError, ValueError):
        return None


def git_exclude_file(repo: Path) -> Path | None:
    """The repository's info/exclude (a worktree's too), so the staged folder is never committed."""
    try:
        done = subprocess.run(["git", "-C", str(repo), "rev-parse", "--git-path", "info/exclude"],
                              capture_output=True, text=True, timeout=30)
    except OSError:
        done = None
    if done is not None and done.returncode == 0 and done.stdout.strip():
        path = Path(done.stdout.strip())
        return path if path.is_absolute() else repo / path
    return repo / ".git" / "info" / "exclude" if (repo / ".git").is_dir() else None


def stage(a) -> int:
    repo = a.repo.resolve()
    target = repo / STAGE_DIR
    data = target / "data"
    data.mkdir(parents=True, exist_ok=True)
    source = default_data_dir()
    files = sorted(source.glob("*.jsonl*")) if source.is_dir() else []
    if not files:
        print(f"dllm-lsp gpujob: error: no benchmark data in {source}", file=sys.stderr)
        return 1
    for file in [*files, source / "LICENSE"]:
        if file.is_file():
            shutil.copyfile(file, data / file.name)
    exclude = git_exclude_file(repo)
    if exclude is not None:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        if f"/{STAGE_DIR}/" not in (exclude.read_text().split() if exclude.is_file() else []):
            with open(exclude, "a") as fh:
                fh.write(f"/{STAGE_DIR}/\n")
    if not a.no_wheels:
        stage_wheels(target / "wheels")
    size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    print(f"staged {target} ({size / 1e6:.1f} MB); carry it as `{STAGE_DIR}` (docs/gpu-job.md)")
    return 0


def stage_wheels(wheels: Path) -> None:
    """Download the pinned wheels into a fresh folder and only then put it in place of `wheels`:
    the lease installs `wheels/*.whl` at once, and two versions of one package there (an earlier
    stage's, before a local upgrade) fail that install and with it the whole lease; a download
    that fails (a wheel missing from the index, no network) leaves the earlier stage as it was."""
    pins = []
    for name in WHEELS:
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            raise ValueError(f"{name} is not installed here: the staged wheels are this environment's "
                             "versions (pip install -e . first)") from None
    fresh = wheels.with_name(wheels.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", "-d", str(fresh), *pins]
    for platform_tag in PLATFORMS:
        cmd += ["--platform", platform_tag]
    done = subprocess.run(cmd)
    got = sorted(f.name for f in fresh.glob("*.whl"))
    if done.returncode != 0 or len(got) != len(pins):
        shutil.rmtree(fresh, ignore_errors=True)
        raise ValueError(f"pip could not download every wheel the lease installs (exit {done.returncode}, "
                         f"{len(got)} of {len(pins)}; pip's message above): {', '.join(pins)}; "
                         f"{wheels} is left as it was, and a lease staged so would not install")
    shutil.rmtree(wheels, ignore_errors=True)
    fresh.rename(wheels)


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    refuse_unknown_choice(ap, argv, ap.commands, "command")
    a = ap.parse_args(argv)
    try:
        if a.verb == "run":
            return run(a)
        if a.verb == "wait":
            return wait(a)
        if a.verb == "stage":
            return stage(a)
        written = unpack(a.pack, a.repo, a.make_default, force=a.force)
        for path in written:
            print(path)
        return 0
    except (ValueError, OSError) as exc:
        return report_error("dllm-lsp gpujob", exc)

"""What every benchmark records beside its figures: device, versions (the code's too), host."""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import torch

from dllm_lsp import __version__
from dllm_lsp.cpus import usable_cpus


@contextmanager
def variable_set(name: str, value: str | None):
    """The environment variable `name` set to `value` for a while (None: left as it is): the
    switches the engine reads per call (the kernels' path, where a run keeps its state), which a
    benchmark flips between the variants it interleaves."""
    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def environment(device: str | None = None) -> dict:
    info = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        # Figures from different machines of one kind differ by 2x on a CPU: name the CPU.
        "cpu_model": cpu_model(),
        "cpus": usable_cpus(),            # the cores this process may use (affinity, cgroup quota)
        "host_cpus": os.cpu_count(),
        "cuda": torch.version.cuda,
        "device": device or ("cuda" if torch.cuda.is_available() else "cpu"),
        # Which code measured: a figure is only comparable with one from the same code.
        "dllm_lsp": dict(code_version()),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    try:
        import triton  # noqa: PLC0415  (optional: absent off Linux, and only its version is read)

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


@lru_cache(maxsize=1)
def code_version(root: Path | None = None) -> dict:
    """The package's version, and where it runs from a git checkout, its commit and whether the
    tracked files differ from it (figures from an uncommitted tree name the commit they started
    from). Never fails and prints nothing: no git, a copy without `.git` (an installed wheel, a
    GPU host's rsync), or a checkout git refuses all give `commit: None`."""
    info = {"version": __version__, "commit": None, "modified": None}
    root = root or Path(__file__).resolve().parents[2]    # (the folder that holds the package)
    # Only the package's own checkout: a wheel installed inside some other repository (a
    # virtual environment in a project folder) must not report that repository's commit.
    if not (root / ".git").exists():
        return info

    def git(*args: str) -> str | None:
        try:
            # The ceiling: a `.git` git does not take must not make it report a repository above.
            done = subprocess.run(["git", "-c", f"safe.directory={root}", "-C", str(root), *args],
                                  env={**os.environ, "GIT_CEILING_DIRECTORIES": str(root.parent)},
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit:
        status = git("status", "--porcelain", "--untracked-files=no")
        info.update(commit=commit, modified=None if status is None else bool(status))
    return info


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def percentiles(samples_ms: list[float]) -> dict:
    ordered = sorted(samples_ms)
    p95_index = min(len(ordered) - 1, max(0, round(0.95 * (len(ordered) - 1))))
    return {
        "p50_ms": round(statistics.median(ordered), 4),
        "p95_ms": round(ordered[p95_index], 4),
        "min_ms": round(ordered[0], 4),
        "max_ms": round(ordered[-1], 4),
        "samples": len(ordered),
    }

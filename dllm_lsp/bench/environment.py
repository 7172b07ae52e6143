"""What every benchmark records beside its figures: device, versions, host."""
from __future__ import annotations

import os
import platform
import statistics
from contextlib import contextmanager
from datetime import datetime, timezone

import torch

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
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    try:
        import triton  # noqa: PLC0415  (optional: absent off Linux, and only its version is read)

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
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

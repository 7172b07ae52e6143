"""Whether a benchmark's model fits this machine, asked before it is built.

The GPU benchmarks build 7-8B-parameter models with random weights. On a machine without a GPU
they fall back to the CPU in float32: 28-32 GB, which the kernel's out-of-memory killer ended two
minutes in, with nothing printed (and every other process on the machine at risk meanwhile).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

MEMINFO = Path("/proc/meminfo")
# The weights may take at most this share of the memory free now: activations, caches and the
# benchmark's own copies need the rest.
WEIGHT_SHARE = 0.8
GPU_HINT = "these shapes are for a GPU: pass --quick for a smoke run of the code path, or --device cuda"


def available_bytes(meminfo: Path = MEMINFO) -> int | None:
    """The memory the kernel says is available now (MemAvailable), None where it does not say."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def weights_too_big(make: Callable[[], torch.nn.Module], dtype: torch.dtype, device: torch.device,
                    free: int | None = None) -> str | None:
    """Why the model `make()` builds, in `dtype`, cannot be built on `device` (a CPU without the
    memory), or None. The model is built on the meta device to count its parameters: no memory."""
    if device.type != "cpu":
        return None      # a GPU's out-of-memory is an error torch raises, not a kill
    with torch.device("meta"):
        parameters = sum(p.numel() for p in make().parameters())
    need = parameters * torch.empty((), dtype=dtype).element_size()
    free = available_bytes() if free is None else free
    if free is None or need <= WEIGHT_SHARE * free:
        return None
    return (f"its {parameters / 1e9:.1f}B parameters need {need / 2**30:.1f} GiB in "
            f"{str(dtype).removeprefix('torch.')}, and {free / 2**30:.1f} GiB is free; {GPU_HINT}")

"""Where the time of a call goes: host or device, kernel launches, device syncs, and which of the
project's own Python functions cost the host most (`bench --profile`, `bench kernels --profile`).

A completion on a GPU is host-bound when the device sits idle between kernels: then what the
device spends (`device_busy_ms`) is a small part of the wall time, every launch and every sync
shows in the wall time, and the fix is fewer launches, fewer syncs (a `.tolist()`, `.any()` or
`int(t)` on a device tensor), less Python per step, or a CUDA graph. These figures say which.
"""
from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Callable
from pathlib import Path

import torch

# Runtime/driver calls that launch a kernel, and those that make the host wait for the device.
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC",
            "cudaGraphLaunch", "cudaLaunchCooperativeKernel")
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
SCALAR_READS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero")
OURS = ("dllm_lsp", "kernels")      # path parts of the project's own code


def profile_calls(fn: Callable[[], object], device: torch.device, repeats: int = 3, top: int = 12) -> dict:
    """Profile `repeats` calls of `fn` (after one warm-up call). Per call: wall time, device busy
    time (CUDA), kernel launches, device syncs and scalar reads, the ops with the most host time
    and (CUDA) device time, and the project's Python functions with the most own time. A profile
    that fails (no CUPTI on the machine, say) is `{"error": ...}`: it never costs the benchmark
    the figures it was measured beside."""
    try:
        return _profile(fn, device, repeats, top)
    except Exception as exc:   # noqa: BLE001 - the profile is extra; the figures around it stand
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}


def _profile(fn: Callable[[], object], device: torch.device, repeats: int, top: int) -> dict:
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415  (slow to import, only --profile needs it)

    cuda = device.type == "cuda"
    fn()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        started = time.perf_counter()
        for _ in range(repeats):
            fn()
        if cuda:
            torch.cuda.synchronize(device)
        wall_ms = (time.perf_counter() - started) * 1e3 / repeats
    averages = prof.key_averages()

    def per_call(names: tuple[str, ...]) -> float:
        return sum(e.count for e in averages if e.key in names) / repeats

    def top_by(attribute: str) -> list[dict]:
        ranked = sorted(averages, key=lambda e: getattr(e, attribute, 0.0) or 0.0, reverse=True)[:top]
        return [{"op": e.key, "calls_per_call": round(e.count / repeats, 2),
                 "self_ms_per_call": round((getattr(e, attribute, 0.0) or 0.0) / repeats / 1e3, 4)}
                for e in ranked]

    out = {
        "repeats": repeats, "wall_ms_per_call": round(wall_ms, 3),
        "ops_per_call": round(sum(e.count for e in averages if e.key.startswith("aten::")) / repeats, 1),
        "host_top": top_by("self_cpu_time_total"),
        "scalar_reads_per_call": per_call(SCALAR_READS),
    }
    if cuda:
        busy_us = sum(getattr(e, "self_device_time_total", 0.0) or 0.0 for e in averages
                      if str(getattr(e, "device_type", "")).endswith("CUDA"))
        out.update(
            kernel_launches_per_call=per_call(LAUNCHES), device_syncs_per_call=per_call(SYNCS),
            device_busy_ms_per_call=round(busy_us / repeats / 1e3, 3),
            device_busy_share=round(busy_us / repeats / 1e3 / wall_ms, 3) if wall_ms > 0 else None,
            device_top=top_by("self_device_time_total"))
    out["python_top"] = python_top(fn, repeats, top)
    return out


def python_top(fn: Callable[[], object], repeats: int, top: int) -> list[dict]:
    """The project's own functions with the most own (tottime) host time per call, under cProfile
    (a separate run: cProfile's overhead would skew the profiler's figures)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeats):
        fn()
    profiler.disable()
    rows = []
    for (filename, line, name), (_, calls, own, cumulative, _) in pstats.Stats(profiler).stats.items():
        parts = Path(filename).parts
        if any(part in OURS for part in parts):
            where = "/".join(parts[next(i for i, p in enumerate(parts) if p in OURS):])
            rows.append({"function": f"{where}:{line}({name})", "calls_per_call": round(calls / repeats, 2),
                         "own_ms_per_call": round(own / repeats * 1e3, 4),
                         "cumulative_ms_per_call": round(cumulative / repeats * 1e3, 4)})
    return sorted(rows, key=lambda r: r["own_ms_per_call"], reverse=True)[:top]

"""Which implementation a kernel call takes: the Triton kernel or its torch reference.

Policy (docs/kernels.md#dispatch), all of it here: Triton on CUDA tensors, the reference
everywhere else, except where a GPU measurement found the kernel slower than its reference
(`MIN_CONTEXT`: span attention over short contexts), and except inputs a kernel leaves to its
reference on a GPU in every mode (`REFERENCE_ON_CUDA`: span attention's fp32). A kernel file
asks `use_triton` (can a kernel run on these tensors) and `worth_running` (should it). The
environment variable DLLM_LSP_KERNELS overrides the measured part:
  - "reference": always the torch reference (to compare, or to work around a kernel bug);
  - "triton": Triton wherever it can run, CPU included when TRITON_INTERPRET=1 (how the
    tests drive the kernels through the model on a machine without a GPU), whatever the
    context length; not for `REFERENCE_ON_CUDA` inputs, which no mode sends to a kernel;
  - "auto" or unset: the policy above.

Calls that need gradients always take the reference (the kernels are inference-only).
Triton is imported lazily and guarded so that a machine without it still imports every
kernel module and falls back to the references.

Run-time fallback: a kernel that fails to compile or launch on a user's GPU (an older
architecture, a Triton or driver bug, too little shared memory) is logged once, disabled
for the rest of the process, and the call and every later one take the torch reference, so
completions keep working instead of failing one by one. DLLM_LSP_DISABLE_KERNELS=a,b
disables kernels by name from the start (the GPU job sets it for kernels that failed its
correctness check). Bad inputs (KernelInputError) and running out of GPU memory are not
kernel faults: they propagate. An illegal memory access poisons the CUDA context, so no
fallback can save the process from that one; the GPU job's correctness phase exists to
find such a kernel before users do.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import TypeVar

import torch

MODES = ("auto", "triton", "reference")
KERNEL_NAMES = ("span_attention", "unmask_select", "rms_norm", "rope")
log = logging.getLogger("dllm_lsp.kernels")
T = TypeVar("T")


class KernelInputError(ValueError):
    """The caller passed inputs a kernel does not take (shape, dtype): a caller bug, not a kernel fault."""


# Measured on an H200 (docs/results/kernels-h200.json: bf16, eager calls, as the engine makes
# them): span attention's two launches (split, then merge) cost more than cat + SDPA over a short
# context, 0.4-0.9x of its speed at 512 and 2048 cached tokens, and it wins from 8192 on
# (1.2-2.5x). Under "auto" it runs only over a context at least this long.
MIN_CONTEXT = {"span_attention": 4096}


# Inputs a kernel leaves to its reference on CUDA in every mode, "triton" included: span
# attention's fp32. Why: an fp32 call gets an exact (IEEE) dot, which spills registers badly at
# every tile that fits (ptxas -v on sm_90; span_attention.tile_config), so it would not be a
# faster path; the GPU job checks the kernels in bf16 only (gpujob/check.py), so it would not be
# a verified one either; and the GPU models run in bf16 (checkpoints.denoiser.default_dtype), so
# nothing needs it. On the CPU the interpreter still runs fp32 through the kernel: how the
# tests check it.
REFERENCE_ON_CUDA = {"span_attention": frozenset({torch.float32})}


def worth_running(name: str, context_tokens: int, *tensors: torch.Tensor) -> bool:
    """Whether the kernel `name`, once `use_triton` says it can run, should: not on CUDA inputs
    of a dtype it leaves to its reference (`REFERENCE_ON_CUDA`: every mode), and under "auto" only
    over at least `MIN_CONTEXT` context tokens ("triton" mode: every length). `tensors`: those
    whose dtype decides (span attention: its queries)."""
    leave = REFERENCE_ON_CUDA.get(name, frozenset())
    if any(t.is_cuda and t.dtype in leave for t in tensors):
        return False
    return kernel_mode() == "triton" or context_tokens >= MIN_CONTEXT.get(name, 0)


_failed: dict[str, str] = {}      # kernel name -> why it was disabled at run time
_failed_lock = threading.Lock()


def disabled_kernels() -> dict[str, str]:
    """Kernels that take the reference for now, with the reason: from the environment or a failure."""
    named = os.environ.get("DLLM_LSP_DISABLE_KERNELS", "")
    found = {n.strip(): "disabled by DLLM_LSP_DISABLE_KERNELS" for n in named.split(",") if n.strip()}
    with _failed_lock:
        found.update(_failed)
    return found


def kernel_enabled(name: str) -> bool:
    return name not in disabled_kernels()


def disable_kernel(name: str, reason: str) -> None:
    """Take the reference for `name` from now on; logs once per kernel."""
    with _failed_lock:
        if name in _failed:
            return
        _failed[name] = reason
    log.warning("Triton kernel %s failed (%s); using its torch reference from now on", name, reason)


def reset_kernel_failures() -> None:
    """Forget run-time failures, so that the next call tries each kernel again. Only the tests call
    it (between cases that break kernels on purpose): a server keeps a failed kernel disabled for
    good, and the GPU job isolates its checks in child processes (DLLM_LSP_DISABLE_KERNELS)."""
    with _failed_lock:
        _failed.clear()


def run_kernel(name: str, kernel: Callable[..., T], reference: Callable[..., T], *args) -> T:
    """kernel(*args), or reference(*args) when the kernel is disabled or fails to compile or launch."""
    if kernel_enabled(name):
        try:
            return kernel(*args)
        except (KernelInputError, torch.cuda.OutOfMemoryError):
            raise
        except Exception as exc:   # CompilationError, OutOfResources, a launch failure (RuntimeError), ...
            disable_kernel(name, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    return reference(*args)


@lru_cache(maxsize=1)
def triton_available() -> bool:
    """Whether the Triton kernels can be built here: Triton imports, and there is a CUDA device,
    its CPU interpreter was asked for, or DLLM_LSP_KERNELS=triton (an ahead-of-time compile for a
    GPU elsewhere). Otherwise nothing could run them, so Triton (a large import) is not even
    loaded: a CPU install neither needs it nor pays for importing it."""
    wanted = os.environ.get("DLLM_LSP_KERNELS", "").strip().lower() == "triton"
    if not (torch.cuda.is_available() or interpreting() or wanted):
        return False
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:   # ImportError, or a broken install that fails while loading its backends
        return False
    return True


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (decided when kernels are decorated)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def kernel_mode() -> str:
    mode = os.environ.get("DLLM_LSP_KERNELS", "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"DLLM_LSP_KERNELS must be one of {MODES}, not {mode!r}")
    return mode


def use_triton(*tensors: torch.Tensor) -> bool:
    """Whether a call on these tensors should take the Triton path."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        # The kernels have no backward: training takes the differentiable reference. Asked first,
        # so a compiled training step never traces the lru_cache'd triton_available (Dynamo warned
        # of it on the H200: it traces through the cache).
        return False
    mode = kernel_mode()
    if mode == "reference" or not triton_available():
        return False
    on_cuda = all(t.is_cuda for t in tensors)
    if on_cuda:
        return True
    # CPU tensors: only the interpreter can run a Triton kernel on them, and only when asked.
    return mode == "triton" and interpreting() and not any(t.is_cuda for t in tensors)


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def multiprocessor_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (sizes the split grids); a small stand-in on CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4

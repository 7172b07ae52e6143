"""Which implementation a kernel call takes: the Triton kernel or its torch reference.

Policy (DESIGN.md): Triton on CUDA tensors, the reference everywhere else. The environment
variable DLLM_LSP_KERNELS overrides it:
  - "reference": always the torch reference (to compare, or to work around a kernel bug);
  - "triton": Triton wherever it can run, CPU included when TRITON_INTERPRET=1 (how the
    tests drive the kernels through the model on a machine without a GPU);
  - "auto" or unset: the policy above.

Calls that need gradients always take the reference (the kernels are inference-only).
Triton is imported lazily and guarded so that a machine without it still imports every
kernel module and falls back to the references.
"""
from __future__ import annotations

import os
from functools import lru_cache

import torch

MODES = ("auto", "triton", "reference")


@lru_cache(maxsize=1)
def triton_available() -> bool:
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
    mode = kernel_mode()
    if mode == "reference" or not triton_available():
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False   # the kernels have no backward: training takes the differentiable reference
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

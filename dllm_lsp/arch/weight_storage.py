"""How model weights sit on disk: bf16 / fp32 safetensors, or int8 with one scale per row.

The shipped model has to stay small (the whole repository travels to a GPU machine in under
64 MiB), so a ~30M-parameter model is stored as int8: every 2-D weight of at least
`MIN_INT8_ELEMENTS` elements becomes symmetric int8 codes `name` plus fp32 scales
`name.int8_scale` (one per output row: absmax / 127); vectors (norm weights) stay float.
Per-row scales keep the rounding error of each row at most half a step of that row's own
range, which for trained transformer matrices costs far less than one parameter size step.

Only safetensors are read; the file's metadata says which storage it holds.
"""
from __future__ import annotations

import contextlib
import os

from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

SCALE_SUFFIX = ".int8_scale"
STORAGE_KEY = "dllm_lsp_storage"
INT8 = "int8-rowwise"
MIN_INT8_ELEMENTS = 4096
STORAGE_DTYPES = ("bfloat16", "float32", "int8")
FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)   # what a float weight may be read from


def quantize_rowwise(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[rows, cols] float -> (int8 codes, fp32 scale per row)."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1).clamp_min(1e-12) / 127.0
    codes = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return codes, scale


def dequantize_rowwise(codes: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (codes.float() * scale.float()[:, None]).to(dtype)


def storage_state(state: dict[str, torch.Tensor], storage: str) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A float state dict -> (tensors to write, safetensors metadata) for `storage`."""
    if storage not in STORAGE_DTYPES:
        raise ValueError(f"weight storage must be one of {STORAGE_DTYPES}, not {storage!r}")
    out: dict[str, torch.Tensor] = {}
    if storage != "int8":
        dtype = getattr(torch, storage)
        out = {k: v.detach().to("cpu", dtype).contiguous() for k, v in state.items()}
        return out, {"format": "pt"}
    for name, tensor in state.items():
        tensor = tensor.detach().to("cpu")
        if tensor.dim() == 2 and tensor.numel() >= MIN_INT8_ELEMENTS and tensor.is_floating_point():
            codes, scale = quantize_rowwise(tensor)
            out[name], out[name + SCALE_SUFFIX] = codes.contiguous(), scale.contiguous()
        else:
            out[name] = tensor.to(torch.bfloat16).contiguous()
    return out, {"format": "pt", STORAGE_KEY: INT8}


def save_weights(state: dict[str, torch.Tensor], path: Path, storage: str = "bfloat16") -> None:
    """Write through a temporary name, then replace: a reader never sees half a file."""
    tensors, metadata = storage_state(state, storage)
    tmp = Path(str(path) + ".tmp")
    save_file(tensors, str(tmp), metadata=metadata)
    # safetensors creates its file readable by its owner alone (0600), unlike the folder's other
    # files: a model trained by one user could not be served by another.
    umask = os.umask(0o022)
    os.umask(umask)
    tmp.chmod(0o666 & ~umask)
    tmp.replace(path)


@contextlib.contextmanager
def _opened(path: Path, device: str | torch.device = "cpu"):
    """`safe_open(path)`, its errors naming the file (safetensors' own said only "SafetensorError:
    Error while deserializing header", naming no file)."""
    try:
        with safe_open(str(path), framework="pt", device=str(device)) as fh:
            yield fh
    except SafetensorError as exc:
        raise ValueError(f"{path.name} is not a readable safetensors file: {exc}") from exc


def weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Each weight's shape as load_weights returns it, read from the file's header alone (int8
    scales are no weights of their own)."""
    with _opened(path) as fh:
        return {name: tuple(fh.get_slice(name).get_shape()) for name in fh.keys()
                if not name.endswith(SCALE_SUFFIX)}


def load_weights(path: Path, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """A float state dict of `dtype` on `device`, whatever the storage on disk."""
    with _opened(path, device) as fh:
        names = list(fh.keys())
        raw = {name: fh.get_tensor(name) for name in names}
    state: dict[str, torch.Tensor] = {}
    for name, tensor in raw.items():
        if name.endswith(SCALE_SUFFIX):
            continue
        scale = raw.get(name + SCALE_SUFFIX)
        if scale is not None:
            if tensor.dtype != torch.int8 or scale.shape != tensor.shape[:1]:
                raise ValueError(f"{path.name}: {name} has int8 scales but is {tensor.dtype} {tuple(tensor.shape)}")
            state[name] = dequantize_rowwise(tensor, scale, dtype)
        elif tensor.dtype == torch.int8:
            raise ValueError(f"{path.name}: {name} is int8 without {name}{SCALE_SUFFIX}")
        elif tensor.dtype not in FLOAT_DTYPES:   # an int32 weight was cast to float: a model of junk
            raise ValueError(f"{path.name}: {name} is stored as {str(tensor.dtype).removeprefix('torch.')}, "
                             "not as bfloat16, float16, float32 or int8 with scales")
        elif tensor.dtype == dtype and tensor.device.type == "cpu":
            # `to` would keep the file's memory map (float32 weights on the CPU): a model saved again
            # in place into its folder then killed the server with SIGBUS at its next step.
            state[name] = tensor.clone()
        else:
            state[name] = tensor.to(dtype)
    return state

"""Safetensors weights of a checkpoint folder: find the shards, check them, load tensors onto the device.

Hugging Face folders hold either one `model.safetensors` or shards named by
`model.safetensors.index.json` ({"weight_map": {tensor name: shard file}}). Only safetensors are
read (no pickle): a folder with only `pytorch_model.bin` is refused with a message saying so.
Headers are read first, so a missing shard, a truncated file or a missing tensor is reported
before any weight is copied to the device.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from dllm_lsp.model_folder import ModelLoadError, check_finite, load_json_file

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "consolidated.00.pth")
# The storage types a weight may have (safetensors' names). An integer or 8-bit float weight is a
# quantized checkpoint whose scales this loader does not apply: cast to float it had loaded and
# written junk with no error.
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")


@dataclass
class WeightFiles:
    folder: Path
    shard_of: dict[str, str]                 # tensor name -> shard file name
    shapes: dict[str, tuple[int, ...]]       # tensor name -> shape, read from the shard headers
    dtypes: dict[str, str]                   # tensor name -> safetensors dtype (F32, BF16, I32, ...)

    @classmethod
    def open(cls, folder: Path) -> "WeightFiles":
        shard_of = _tensor_to_shard(folder)
        shapes: dict[str, tuple[int, ...]] = {}
        dtypes: dict[str, str] = {}
        by_shard: dict[str, list[str]] = {}
        for name, shard in shard_of.items():
            by_shard.setdefault(shard, []).append(name)
        for shard, names in sorted(by_shard.items()):
            path = folder / shard
            if path.exists() and not path.is_file():   # a folder, a FIFO, /dev/zero: it was called missing
                raise ModelLoadError(f"shard {shard} in {folder} is not a regular file")
            if not path.is_file():
                raise ModelLoadError(f"{folder} is incomplete: {INDEX_FILE} names shard {shard}, which is missing")
            found, kinds = _read_header(path)
            absent = [n for n in names if n not in found]
            if absent:
                raise ModelLoadError(
                    f"shard {shard} in {folder} lacks {len(absent)} tensor(s) the index puts there, e.g. {absent[0]}"
                )
            shapes.update({n: found[n] for n in names})
            dtypes.update({n: kinds[n] for n in names})
        return cls(folder, shard_of, shapes, dtypes)

    def require(self, expected: dict[str, tuple[int, ...]]) -> None:
        """Every expected tensor exists with the expected shape, or a clear error naming the first that doesn't."""
        missing = [n for n in expected if n not in self.shapes]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise ModelLoadError(f"the weights in {self.folder} lack tensor {missing[0]}{more}")
        for name, shape in expected.items():
            if tuple(self.shapes[name]) != tuple(shape):
                raise ModelLoadError(
                    f"tensor {name} in {self.folder} has shape {tuple(self.shapes[name])}, "
                    f"but config.json implies {tuple(shape)}"
                )
        for name in expected:
            if self.dtypes[name] not in FLOAT_DTYPES:
                raise ModelLoadError(
                    f"tensor {name} in {self.folder} is stored as {self.dtypes[name]}, not as floating point "
                    f"({', '.join(FLOAT_DTYPES)}): quantized checkpoints are not supported"
                )

    def check_head_dim(self, tensor: str, heads: int, head_dim: int) -> None:
        """`tensor`, a projection whose rows are `heads` heads (q_proj: the attention heads; a fused
        query_key_value: q's, k's and v's), holds heads `head_dim` wide, as config.json says. Told
        in the config's terms: `require` would name one tensor's shape, leaving the user to work
        out that the head width is what disagrees. A tensor missing or off in another way is left
        to `require`."""
        shape = self.shapes.get(tensor)
        if not shape or shape[0] == heads * head_dim or shape[0] % heads:
            return
        raise ModelLoadError(f"config.json gives a head_dim of {head_dim}, but the heads in the weights of "
                             f"{self.folder} are {shape[0] // heads} wide ({tensor} has {shape[0]} rows for "
                             f"{heads} heads): set head_dim to the width the model was trained with")

    def check_layers(self, n_layers: int) -> None:
        """The weights hold no more layers than config.json says: those past it would be left out
        without a word, a truncated model that writes junk."""
        found = {int(m.group(1)) for name in self.shapes for m in [_LAYER.search(name)] if m}
        if found and max(found) >= n_layers:
            raise ModelLoadError(f"the weights in {self.folder} hold {max(found) + 1} layers, "
                                 f"but config.json says {n_layers}")

    def load(self, names: dict[str, str], device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """{target name: tensor name in the files} -> {target name: tensor on `device` in `dtype`}.

        Each shard is opened once, directly on the device, so a 15 GB model never sits in host memory whole.
        """
        wanted: dict[str, list[tuple[str, str]]] = {}
        for target, source in names.items():
            wanted.setdefault(self.shard_of[source], []).append((target, source))
        out: dict[str, torch.Tensor] = {}
        for shard, pairs in sorted(wanted.items()):
            path = self.folder / shard
            try:
                with safe_open(str(path), framework="pt", device=str(device)) as f:
                    for target, source in pairs:
                        tensor = f.get_tensor(source)
                        # On the CPU a tensor already of `dtype` (float32 weights) is the file's
                        # memory map, and `to` keeps it: a checkpoint saved again in place into
                        # the folder (same file, cut and rewritten) then killed the server with
                        # SIGBUS at its next step. A copy of its own, as any other dtype gets.
                        out[target] = tensor.clone() if tensor.dtype == dtype and tensor.device.type == "cpu" \
                            else tensor.to(dtype)
            except SafetensorError as exc:
                raise ModelLoadError(f"shard {shard} in {self.folder} is corrupt: {exc}") from exc
        check_finite(out, self.folder)
        return out


_LAYER = re.compile(r"\.(?:layers|blocks)\.(\d+)\.")   # model.layers.3.…, model.transformer.blocks.3.…


def _tensor_to_shard(folder: Path) -> dict[str, str]:
    index = folder / INDEX_FILE
    if index.is_file():
        data = load_json_file(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not weight_map:
            raise ModelLoadError(f"{index} has no weight_map (tensor name -> shard file)")
        # A path, or a name that is the folder itself ("", ".", ".."): only a file of the folder is a shard.
        bad = [s for s in weight_map.values() if not isinstance(s, str) or s in ("", ".", "..") or "/" in s or "\\" in s]
        if bad:
            raise ModelLoadError(f"{index} names an invalid shard file {bad[0]!r}")
        return dict(weight_map)
    single = folder / SINGLE_FILE
    if single.is_file():
        return {name: SINGLE_FILE for name in _read_header(single)[0]}
    shards = sorted(p.name for p in folder.glob("*.safetensors"))
    if shards:
        raise ModelLoadError(
            f"{folder} has safetensors shards ({', '.join(shards[:3])}) but no {INDEX_FILE} to say which tensor is where"
        )
    pickles = [name for name in PICKLE_FILES if (folder / name).exists()]
    if pickles:
        raise ModelLoadError(
            f"{folder} only has pickle weights ({pickles[0]}); they can run code when loaded and are refused. "
            "Convert them to safetensors (or download the folder's *.safetensors files)"
        )
    raise ModelLoadError(f"{folder} has no weights: expected {SINGLE_FILE} or {INDEX_FILE} with its shards")


def _read_header(path: Path) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    """Tensor names -> shapes and -> dtypes from a safetensors header, and a check that the file
    holds all their bytes; ModelLoadError naming the file where it cannot."""
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            slices = {name: f.get_slice(name) for name in f.keys()}
            shapes = {name: tuple(s.get_shape()) for name, s in slices.items()}
            dtypes = {name: s.get_dtype() for name, s in slices.items()}
    except (SafetensorError, OSError) as exc:
        raise ModelLoadError(f"{path.name} in {path.parent} is not a readable safetensors file: {exc}") from exc
    _check_length(path)
    return shapes, dtypes


def _check_length(path: Path) -> None:
    """A shard cut short (an interrupted download) must fail here, not halfway through loading."""
    have = path.stat().st_size
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise ModelLoadError(f"{path.name} in {path.parent} is truncated (no header)")
        header_len = int.from_bytes(raw, "little")
        try:
            header = json.loads(fh.read(header_len))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelLoadError(f"{path.name} in {path.parent} has a corrupt header: {exc}") from exc
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    need = 8 + header_len + (max(ends) if ends else 0)
    if have < need:
        raise ModelLoadError(f"{path.name} in {path.parent} is truncated: {have} bytes of {need}")

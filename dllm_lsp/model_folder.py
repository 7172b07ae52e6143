"""What every model loader shares: the error a bad folder raises, and reading its JSON files.

Below both `loader` (which picks the family) and `checkpoints` / `arch` (which load one), so the
family loaders can raise ModelLoadError without importing the dispatcher that calls them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch


class ModelLoadError(Exception):
    """The model folder is missing, incomplete, corrupt or of an unsupported family."""


# The largest sizes a config.json may give any family, the embedded model's included (its
# EmbeddedConfig, the open checkpoints' checkpoints/config_values.py). Far above every published
# diffusion coder (Dream-7B: 28 layers, 3,584 wide, 152k tokens; the MoE layouts stay well below
# too), and low enough that nothing built for a value up to them costs memory before the weights
# are compared with the config.
MAX_LAYERS = 1024
MAX_SIZE = 1 << 22     # any width, head count, expert count, vocabulary or position count


# The largest JSON or tokenizer file a model folder may hold. Published ones stay far below it (a
# config.json is a few KB; a 150k-token tokenizer.json about 10 MB; the index of a 100B MoE model's
# shards a few MB), and they are read whole: a 3 GB config.json (a sparse file of nothing) took 6.3
# GB of memory and a minute before "not valid JSON".
MAX_TEXT_FILE_BYTES = 64 << 20


# The files a model's load reads, in every family (and every `*.safetensors`: the single file or
# the shards): the model is what they hold. The folder's other files are no part of it: a training
# run's log (appended at every step, in the folder it trains), a model card, an evaluation.
MODEL_FILES = frozenset({"config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
                         "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"})

FolderStamp = tuple[tuple[str, int, int, int], ...]


def folder_stamp(folder: Path | str) -> FolderStamp | None:
    """The identity of the model files in `folder` (MODEL_FILES and the safetensors): each one's
    name, size, modification time (ns) and inode, from one listing and one stat per file. Nothing
    is read, so a 15 GB checkpoint costs what a tiny one does. A file written again, replaced by
    another (a new inode: `train` renames a whole new folder into place, the GPU job's unpack
    copies each file anew), added or removed changes it. None when the folder cannot be listed
    (gone, not a folder)."""
    found = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name not in MODEL_FILES and not entry.name.endswith(".safetensors"):
                    continue
                try:
                    st = entry.stat()   # through a link: the Hugging Face cache links each file to its blob
                except OSError:         # a dangling link, a file removed since the listing
                    found.append((entry.name, -1, -1, -1))
                    continue
                found.append((entry.name, st.st_size, st.st_mtime_ns, st.st_ino))
    except OSError:
        return None
    return tuple(sorted(found))


def check_text_file_size(path: Path) -> None:
    """ModelLoadError naming `path` when it is larger than a model's JSON or tokenizer file can be."""
    size = path.stat().st_size
    if size > MAX_TEXT_FILE_BYTES:
        raise ModelLoadError(f"{path} is {size / (1 << 20):,.0f} MiB, too large for a model's JSON or tokenizer "
                             f"file (at most {MAX_TEXT_FILE_BYTES >> 20} MiB): a damaged or misplaced file?")


def load_json_file(path: Path):
    """The parsed JSON in `path`; ModelLoadError naming the file when it is not valid JSON or too
    large to be a model's."""
    check_text_file_size(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path} is not valid JSON: {exc}") from exc
    except RecursionError:
        raise ModelLoadError(f"{path} is nested too deeply to be a model's JSON") from None


def check_weights_match(expected: dict[str, tuple[int, ...]], found: dict[str, tuple[int, ...]], folder: Path) -> None:
    """ModelLoadError, in one line, when the weights (`found`: name -> shape, from the file's
    header) are not the tensors that the model built from `folder`'s config.json expects: the
    first mismatching tensor is named, the rest counted (torch's own error lists every one, one
    line each). Checked before any tensor is read: a file claiming a huge extra tensor was read
    whole first (1.9 GB for a sparse file of nothing)."""
    problems = []
    for name, shape in expected.items():
        if name not in found:
            problems.append(f"{name} {tuple(shape)} is missing from the weights")
        elif tuple(found[name]) != tuple(shape):
            problems.append(f"{name} is {tuple(found[name])} in the weights but {tuple(shape)} by config.json")
    problems += [f"{name} in the weights is not in the model config.json describes"
                 for name in found if name not in expected]
    if problems:
        more = f" (and {len(problems) - 1} more mismatching tensors)" if len(problems) > 1 else ""
        raise ModelLoadError(f"could not load {folder}: its config.json does not match its weights: "
                             f"{problems[0]}{more}")



def nonfinite_weights(state: dict[str, torch.Tensor]) -> list[str]:
    """The names of the floating-point tensors in `state` that hold a NaN or an infinity. One
    reduction per tensor in float32 (a NaN or an infinity makes the sum non-finite; no boolean
    copy of a 545M-element embedding), where the tensors already are: a GPU checks a 7B model in
    milliseconds, a CPU in seconds."""
    return [name for name, tensor in state.items()
            if tensor.is_floating_point() and not torch.isfinite(tensor.sum(dtype=torch.float32))]


def check_finite(state: dict[str, torch.Tensor], folder: Path) -> None:
    """ModelLoadError when a weight holds NaN or an infinity (a training run that diverged and was
    saved, a damaged conversion): such a model loads, but every completion it writes is the same
    meaningless token, with no error anywhere."""
    bad = nonfinite_weights(state)
    if bad:
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        raise ModelLoadError(f"could not load {folder}: its weights hold NaN or infinite values ({bad[0]}{more}); "
                             "a model saved from a training run that diverged?")

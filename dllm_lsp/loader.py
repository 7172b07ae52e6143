"""Find and load a model folder, whatever family it is, with clear errors for bad folders.

Only safetensors weights are read and nothing in the folder is executed.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

import torch

from .arch.embedded import MODEL_TYPE, EmbeddedConfig
from .arch.embedded_denoiser import EmbeddedDenoiser, trained_max_slot
from .checkpoints import load_checkpoint
from .checkpoints.tokenizer_files import check_vocabulary, read_tokenizer_json
from .engine.denoiser import Denoiser
from .cli_errors import one_line
from .model_folder import ModelLoadError, load_json_file

__all__ = ["ModelLoadError", "load_model", "resolve_device", "resolve_model_path", "read_config", "shipped_model_names"]


def resolve_device(device: str | None) -> torch.device:
    if device in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ModelLoadError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} asked for, but this torch build sees no CUDA GPU")
    if dev.type == "cpu":
        return torch.device("cpu")   # `cpu:0` is torch's spelling too; safetensors refuses it
    return dev


def shipped_models_dir() -> Path:
    return Path(str(resources.files("dllm_lsp.shipped_models")))


def default_name(marker: str, device_type: str | None) -> str | None:
    """The model models/DEFAULT names for a device type. The file holds a bare name (every
    device) and/or `TYPE: NAME` lines (`cuda: ...`, `cpu: ...`): a model trained for a GPU can be
    the default there while a small one stays the default of CPUs, where the large one would
    take a second per completion. A `TYPE:` line wins over the bare name; a device type with
    neither gets the CPU's model (the smaller one)."""
    fallback, by_kind = None, {}
    for line in marker.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        kind, sep, name = line.partition(":")
        if sep:
            by_kind.setdefault(kind.strip(), name.strip())
        else:
            fallback = fallback or line
    if device_type in by_kind:
        return by_kind[device_type]
    return fallback or by_kind.get("cpu") or next(iter(by_kind.values()), None)


def with_default(marker: str, device_type: str, name: str) -> str:
    """models/DEFAULT's text with `name` the default for `device_type` (the other lines kept)."""
    def kind(line: str) -> str | None:
        head, sep, _ = line.partition(":")
        return head.strip() if sep else None

    kept = [line for line in marker.splitlines() if line.strip() and kind(line) != device_type]
    return "\n".join([*kept, f"{device_type}: {name}"]) + "\n"


def default_model_path(device_type: str | None = None) -> Path:
    """The shipped model folder models/DEFAULT names for this device type (else the first folder
    with a config)."""
    root = shipped_models_dir()
    marker = root / "DEFAULT"
    name = default_name(marker.read_text(), device_type) if marker.is_file() else None
    if name:
        return root / name
    for child in sorted(root.iterdir()):
        if (child / "config.json").is_file():
            return child
    raise ModelLoadError(f"no model is shipped in {root}; pass --model with a model folder")


def shipped_model_names() -> list[str]:
    """The models shipped in models/ (folders with a config.json), by name."""
    root = shipped_models_dir()
    if not root.is_dir():
        return []
    return sorted(child.name for child in root.iterdir() if (child / "config.json").is_file())


def resolve_model_path(spec: str | Path | None, device_type: str | None = None) -> Path:
    """A model folder: `spec` as a path, a shipped model's name, or None / "default" for the
    shipped default of `device_type` ("cpu", "cuda"; models/DEFAULT)."""
    if spec in (None, "", "default"):
        return default_model_path(device_type)
    # A shipped model's bare name means that model, whatever the current folder holds: an editor
    # starts the server in the workspace, and a folder there of the same name had replaced it.
    # `./name` is the folder.
    if isinstance(spec, str) and spec in shipped_model_names():
        return shipped_models_dir() / spec
    path = Path(spec).expanduser()
    try:
        return _existing_folder(path, spec)
    except OSError as exc:   # a name too long for the file system, a path nested past its limit
        raise ModelLoadError(f"model folder {str(spec)[:200]} cannot be read: {exc.strerror or exc}") from None


def _existing_folder(path: Path, spec: str | Path) -> Path:
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:   # safetensors and tokenizers open files by UTF-8 paths only
        raise ModelLoadError(f"model folder {ascii(str(path))[1:-1]} has a name that is not UTF-8: "
                             "rename it (the weight and tokenizer libraries cannot open it)") from None
    if not path.exists():
        shipped = shipped_models_dir() / str(spec)
        if (shipped / "config.json").is_file():
            return shipped
        names = shipped_model_names()
        known = f"; shipped models: {', '.join(names)}" if names else "; no model is shipped"
        raise ModelLoadError(f"model folder {path} does not exist and is not a shipped model's name "
                             f"(pass a model folder{known})")
    if not path.is_dir():
        raise ModelLoadError(f"model path {path} is not a folder")
    return path


def read_config(folder: Path) -> dict:
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(f"{folder} has no config.json")
    config = load_json_file(config_path)
    if not isinstance(config, dict):
        raise ModelLoadError(f"{config_path} must hold a JSON object")
    return config


def load_model(spec: str | Path | None = None, device: str | None = "auto") -> Denoiser:
    """Load the model folder `spec` (default: the shipped model) onto `device`."""
    dev = resolve_device(device)
    folder = resolve_model_path(spec, dev.type)
    config = read_config(folder)
    try:
        if config.get("model_type") == MODEL_TYPE:
            return load_embedded(folder, config, dev)
        return load_checkpoint(folder, config, dev)
    except ModelLoadError:
        raise
    except torch.cuda.OutOfMemoryError as exc:
        raise ModelLoadError(f"the GPU ran out of memory loading {folder.name}: {one_line(exc)}") from exc
    except Exception as exc:  # corrupt weights, shape mismatches, broken tokenizer files
        # One line: some of these (torch's state-dict errors) run to a line per tensor.
        raise ModelLoadError(f"could not load {folder}: {type(exc).__name__}: {one_line(exc)}") from exc


def load_embedded(folder: Path, config: dict, device: torch.device) -> Denoiser:
    for name in ("model.safetensors", "tokenizer.json"):
        if not (folder / name).is_file():
            raise ModelLoadError(f"{folder} has no {name}")
    cfg = embedded_config(folder, config)
    # A tokenizer with more tokens than the embedding has rows loaded, and the first text using one
    # failed its completion with IndexError.
    tokenizer = read_tokenizer_json(folder / "tokenizer.json")
    check_vocabulary(tokenizer, cfg.vocab_size)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return EmbeddedDenoiser.load(folder, cfg, tokenizer, device, dtype, max_slot=trained_max_slot(config))


def embedded_config(folder: Path, config: dict) -> EmbeddedConfig:
    """The embedded model's config.json, checked (its sizes bounded: EmbeddedConfig) before
    anything is built or its other files are read."""
    try:
        cfg = EmbeddedConfig.from_json(config)
    except (TypeError, ValueError) as exc:
        raise ModelLoadError(f"could not load {folder}: its config.json is invalid: {exc}") from exc
    if cfg.head_dim % 2:
        # Rotary position embeddings rotate pairs of channels: such a model loaded, and its first
        # forward pass failed with a shape error (the open checkpoints refuse it alike:
        # checkpoints/config_values.head_width).
        raise ModelLoadError(f"could not load {folder}: its config.json 'dim' {cfg.dim} / 'n_heads' {cfg.n_heads} "
                             f"makes heads {cfg.head_dim} wide: rotary position embeddings need an even head_dim "
                             "(they rotate pairs of channels)")
    return cfg

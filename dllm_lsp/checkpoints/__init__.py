"""Open diffusion checkpoints (LLaDA, Dream family, DreamOn, Open-dCoder) loaded natively.

`load_checkpoint(folder, config, device)` is what dllm_lsp.loader calls for any folder that is
not the embedded model: it recognises the family from config.json, checks the folder
(weights, tokenizer, special tokens) before copying anything, and builds the family's
bidirectional transformer straight from the safetensors shards onto the device. Nothing in
the folder is executed and no pickle is read.
"""
from __future__ import annotations

from pathlib import Path

import torch

from dllm_lsp.engine.denoiser import Denoiser

from .families import FAMILIES, DREAMON, detect_family, supported_list

SUPPORTED_FAMILIES = tuple(f.key for f in FAMILIES)

__all__ = ["load_checkpoint", "SUPPORTED_FAMILIES", "supported_list"]


CACHE_ENV, REFRESH_ENV = "DLLM_LSP_CACHE", "DLLM_LSP_CACHE_REFRESH"


def load_checkpoint(folder: Path, config: dict, device: torch.device, *, dtype: torch.dtype | None = None,
                    cache: str | None = None, refresh_every: int | None = None) -> Denoiser:
    """`cache` ("dual" / "none") and `refresh_every` default to $DLLM_LSP_CACHE / $DLLM_LSP_CACHE_REFRESH,
    else the dual cache refreshed only at the first step; `Denoiser.configure` changes them later."""
    from dllm_lsp.loader import ModelLoadError  # noqa: PLC0415

    from .architecture import BidirectionalLM  # noqa: PLC0415
    from .denoiser import CheckpointDenoiser, default_dtype  # noqa: PLC0415
    from .dreamon import DreamOnDenoiser  # noqa: PLC0415
    from .families import (  # noqa: PLC0415
        delete_token, max_context, model_config, read_generation_config, special_tokens, tensor_names,
    )
    from .tokenizer_files import load_tokenizer  # noqa: PLC0415
    from .weights import WeightFiles  # noqa: PLC0415

    folder = Path(folder)
    settings = _cache_settings(cache, refresh_every)
    generation = read_generation_config(folder)
    # Family first (config.json alone decides most cases), so an unknown model is refused with the
    # supported list before its tokenizer or weights are looked at.
    # (A Qwen2 folder needs its tokenizer to tell Open-dCoder from an autoregressive model.)
    if not _may_be_qwen2(config):
        detect_family(config, generation, None)
    tokens = load_tokenizer(folder)
    family = detect_family(config, generation, tokens)
    try:
        cfg = model_config(family, config)
    except ValueError as exc:
        raise ModelLoadError(f"config.json of {folder} describes an impossible shape: {exc}") from exc
    names = tensor_names(family, cfg)
    with torch.device("meta"):
        model = BidirectionalLM(cfg)
    expected = {name: tuple(p.shape) for name, p in model.named_parameters()}
    files = WeightFiles.open(folder)
    files.require({names[ours]: shape for ours, shape in expected.items()})
    special = special_tokens(family, config, generation, tokens, cfg.vocab_size)

    dtype = dtype or default_dtype(device)
    state = files.load(names, device, dtype)
    model.load_state_dict(state, strict=True, assign=True)
    del state
    model.fuse_projections()
    model.rotary.inv_freq = model.rotary.inv_freq.to(device)
    if family is DREAMON:
        denoiser = DreamOnDenoiser(model, tokens.tokenizer, special, family, folder.name,
                                   max_context(family, config), settings)
        denoiser.delete_id = delete_token(config, generation, tokens, special)
        return denoiser
    return CheckpointDenoiser(model, tokens.tokenizer, special, family, folder.name, max_context(family, config),
                              settings)


def _may_be_qwen2(config: dict) -> bool:
    archs = config.get("architectures") or []
    return str(config.get("model_type", "")).lower() == "qwen2" or "Qwen2ForCausalLM" in archs


def _cache_settings(cache: str | None, refresh_every: int | None):
    import os  # noqa: PLC0415

    from dllm_lsp.loader import ModelLoadError  # noqa: PLC0415

    from .session import CacheSettings  # noqa: PLC0415

    mode = cache if cache is not None else (os.environ.get(CACHE_ENV, "").strip().lower() or "dual")
    raw = refresh_every if refresh_every is not None else (os.environ.get(REFRESH_ENV, "").strip() or 0)
    try:
        return CacheSettings(mode, int(raw))
    except ValueError as exc:
        raise ModelLoadError(
            f"bad cache setting ({CACHE_ENV}={mode!r}, {REFRESH_ENV}={raw!r}): {exc}; "
            "use dual or none, and a refresh interval >= 0"
        ) from exc

"""Open diffusion checkpoints (LLaDA, Dream family, DreamOn, Open-dCoder; the block-diffusion and newer
coders of block_families.py) loaded natively.

`load_checkpoint(folder, config, device)` is what dllm_lsp.loader calls for any folder that is
not the embedded model: it recognises the family from config.json, checks the folder
(weights, tokenizer, special tokens) before copying anything, and builds the family's
bidirectional transformer straight from the safetensors shards onto the device. Nothing in
the folder is executed and no pickle is read.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from dllm_lsp.engine.denoiser import Denoiser
from dllm_lsp.model_folder import ModelLoadError

from .architecture import BidirectionalLM
from .block_families import BLOCK_FAMILIES, detect_block_family
from .block_loader import load_block_checkpoint
from .denoiser import CheckpointDenoiser, default_dtype
from .families import (
    DREAMON,
    FAMILIES,
    delete_token,
    detect_family,
    max_context,
    model_config,
    read_generation_config,
    special_tokens,
    supported_list,
    tensor_names,
)
from .tokenizer_files import load_tokenizer
from .weights import WeightFiles

SUPPORTED_FAMILIES = tuple(f.key for f in FAMILIES + BLOCK_FAMILIES)

__all__ = ["load_checkpoint", "SUPPORTED_FAMILIES", "supported_list"]


def load_checkpoint(folder: Path, config: dict, device: torch.device, *, dtype: torch.dtype | None = None) -> Denoiser:
    """The checkpoint in `folder` as a Denoiser on `device` (how it caches its context is a
    per-request option of the engine, not part of the loaded model)."""
    folder = Path(folder)
    block = detect_block_family(config)      # the block-diffusion and newer coders (block_families.py)
    if block is not None:
        return load_block_checkpoint(folder, config, block, device, dtype=dtype)
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
    context = max_context(family, config)
    files = WeightFiles.open(folder)
    files.check_layers(cfg.n_layers)
    names = tensor_names(family, cfg)
    with torch.device("meta"):
        model = BidirectionalLM(cfg)
    expected = {name: tuple(p.shape) for name, p in model.named_parameters()}
    files.check_head_dim(names["layers.0.attn.q_proj.weight"], cfg.n_heads, cfg.head_dim)
    files.require({names[ours]: shape for ours, shape in expected.items()})
    special = special_tokens(config, generation, tokens, cfg.vocab_size, prepend_bos=family.prepend_bos,
                             expand=family is DREAMON)
    if family is DREAMON:   # its delete token makes the engine decode it with variable-length slots
        special = replace(special, delete_id=delete_token(config, generation, tokens, special))

    dtype = dtype or default_dtype(device)
    state = files.load(names, device, dtype)
    model.load_state_dict(state, strict=True, assign=True)
    del state
    model.fuse_projections()
    return CheckpointDenoiser(model, tokens.tokenizer, special, family, folder.name, context)


def _may_be_qwen2(config: dict) -> bool:
    archs = config.get("architectures") or []
    return str(config.get("model_type", "")).lower() == "qwen2" or "Qwen2ForCausalLM" in archs

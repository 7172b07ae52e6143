"""Load a block-diffusion or newer diffusion-coder folder (block_families.py) natively from safetensors.

Same guarantees as the older families: the family comes from config.json, every shard header is
checked against the shapes config.json implies before a tensor is copied, only safetensors are
read, nothing in the folder is executed. Block-causal families become a `BlockDenoiser` (decoded
by `engine.blockwise`); the bidirectional ones (LLaDA-MoE, CoDA) a `CheckpointDenoiser`, decoded
by the masked-diffusion loop with the dual cache like LLaDA and Dream.
"""
from __future__ import annotations

from pathlib import Path

import torch

from dllm_lsp.engine.denoiser import Denoiser
from dllm_lsp.model_folder import ModelLoadError

from .block_denoiser import BlockDenoiser, find_fim
from .block_families import (
    BIDIRECTIONAL, BlockFamily, Plan, block_config, block_size, max_context, sub_block_size, weight_plan,
)
from .block_model import BlockLM
from .denoiser import CheckpointDenoiser, default_dtype
from .families import Family, read_generation_config, special_tokens
from .tokenizer_files import load_tokenizer
from .weights import WeightFiles

MASK_TEXTS = ("<|MASK|>", "<|mask|>", "<|mdm_mask|>", "<mask>", "<[mask]>")   # looked up when no config names the mask


def load_block_checkpoint(folder: Path, config: dict, family: BlockFamily, device: torch.device, *,
                          dtype: torch.dtype | None = None) -> Denoiser:
    folder = Path(folder)
    generation = read_generation_config(folder)
    cfg = block_config(family, config)
    context = max_context(config)
    block = block_size(family, config, generation) if family.attention != BIDIRECTIONAL else None
    sub_block = sub_block_size(family, config, generation, block) if block is not None else None   # checked before loading
    tokens = load_tokenizer(folder)
    files = WeightFiles.open(folder)
    files.check_layers(cfg.n_layers)
    plan = weight_plan(family, cfg)
    first = plan["layers.0.attn.qkv_proj.weight"][0][0]   # [q, k, v] tensors, or LLaDA2's one fused tensor
    files.check_head_dim(first[0][0], cfg.n_heads if len(first) > 1 else cfg.n_heads + 2 * cfg.n_kv_heads, cfg.head_dim)
    files.require({name: shape for groups, _ in plan.values() for group in groups for name, shape in group})
    special = special_tokens(config, generation, tokens, cfg.vocab_size, mask_texts=MASK_TEXTS,
                             default_mask=family.default_mask)
    fim = find_fim(tokens.tokenizer) if block is not None else None   # block-wise prompts only
    if fim is not None and max(fim.prefix_id, fim.suffix_id, fim.middle_id) >= cfg.vocab_size:
        # The prompt of every block-wise completion starts with them: each would fail with IndexError.
        raise ModelLoadError(f"the tokenizer's fill-in-the-middle tokens ({fim.prefix_id}, {fim.suffix_id}, "
                             f"{fim.middle_id}) are outside the {cfg.vocab_size}-row embedding")
    model = load_weights(cfg, plan, files, device, dtype or default_dtype(device))
    if family.attention == BIDIRECTIONAL:
        spec = Family(family.key, family.title, family.layout, family.shift, False)
        return CheckpointDenoiser(model, tokens.tokenizer, special, spec, folder.name, context)
    return BlockDenoiser(model, tokens.tokenizer, special, family, folder.name, context, block,
                         sub_block, fim)


def load_weights(cfg, plan: Plan, files: WeightFiles, device: torch.device, dtype: torch.dtype) -> BlockLM:
    """Build the model on the meta device and fill it layer by layer (a MoE layer's experts are stacked
    as they arrive, so host memory never holds more than one layer twice)."""
    with torch.device("meta"):
        model = BlockLM(cfg)
    expected = dict(model.named_parameters())
    if set(expected) != set(plan):
        raise ModelLoadError(f"internal: weight plan and model disagree on {sorted(set(expected) ^ set(plan))[:3]}")
    by_layer: dict[str, list[str]] = {}
    for ours in plan:
        key = ".".join(ours.split(".")[:2]) if ours.startswith("layers.") else "top"
        by_layer.setdefault(key, []).append(ours)
    state: dict[str, torch.Tensor] = {}
    for names in by_layer.values():
        sources = {name: name for ours in names for group in plan[ours][0] for name, _ in group}
        loaded = files.load(sources, device, dtype)
        for ours in names:
            groups, stacked = plan[ours]
            parts = [torch.cat([loaded[n] for n, _ in group]) if len(group) > 1 else loaded[group[0][0]]
                     for group in groups]
            tensor = torch.stack(parts) if stacked else parts[0]
            if tuple(tensor.shape) != tuple(expected[ours].shape):
                raise ModelLoadError(f"internal: {ours} assembled as {tuple(tensor.shape)}, "
                                     f"expected {tuple(expected[ours].shape)}")
            state[ours] = tensor
        del loaded
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()

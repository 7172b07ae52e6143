"""Tiny random checkpoint folders of the block-diffusion and newer coder families, for tests.

As `tiny.py` does for the older families: the file names (config.json, two safetensors shards +
index, tokenizer.json, tokenizer_config.json), the config keys and the tensor names are each
family's real ones; the shapes and the vocabulary (a ~320-token byte-level BPE with the family's
special tokens appended) are tiny, so special ids are a few hundred and the config files carry
them where the real ones carry 151669 or 156895. Every folder also gets a trap `modeling_*.py`
that would leave a marker file if anything executed it.

SDAR's folder declares its mask nowhere but in the vocabulary (`<|MASK|>`), as far as we could
tell from its reference code; the others name `mask_token_id` in config.json.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from .block_families import (
    CODA, FAST_DLLM_V2, LLADA2, LLADA_MOE, SDAR, SDAR_MOE, STABLE_DIFFCODER, BlockFamily, block_config, weight_plan,
)
from .tiny import EXECUTED_MARKER, TRAP_CODE, tiny_tokenizer, write_safetensors

BLOCK_LAYOUTS = ("sdar", "sdar-moe", "stable-diffcoder", "fast-dllm-v2", "llada2", "llada-moe", "coda")
FAMILY_OF: dict[str, BlockFamily] = {
    "sdar": SDAR, "sdar-moe": SDAR_MOE, "stable-diffcoder": STABLE_DIFFCODER, "fast-dllm-v2": FAST_DLLM_V2,
    "llada2": LLADA2, "llada-moe": LLADA_MOE, "coda": CODA,
}
QWEN_FIM = ["<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>"]
SPECIALS = {
    "sdar": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *QWEN_FIM, "<|MASK|>"],
    "sdar-moe": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *QWEN_FIM, "<|MASK|>"],
    "stable-diffcoder": ["<[begin▁of▁sentence]>", "<[end▁of▁sentence]>", "<[PAD▁TOKEN]>", "<[fim-prefix]>",
                         "<[fim-middle]>", "<[fim-suffix]>", "<[MASK]>"],
    "fast-dllm-v2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *QWEN_FIM, "<|mask|>"],
    "llada2": ["<|endoftext|>", "<role>", "</role>", "<|mask|>"],
    "llada-moe": ["<|endoftext|>", "<role>", "</role>", "<|mdm_mask|>"],
    "coda": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *QWEN_FIM, "<|mask|>"],
}
MASK_TEXT = {"sdar": "<|MASK|>", "sdar-moe": "<|MASK|>", "stable-diffcoder": "<[MASK]>", "fast-dllm-v2": "<|mask|>",
             "llada2": "<|mask|>", "llada-moe": "<|mdm_mask|>", "coda": "<|mask|>"}
EOS_TEXT = {"stable-diffcoder": "<[end▁of▁sentence]>"}
TRAP_FILE = {"sdar": "modeling_sdar.py", "sdar-moe": "modeling_sdar_moe.py",
             "stable-diffcoder": "modeling_stable_diffcoder.py", "fast-dllm-v2": "modeling.py",
             "llada2": "modeling_llada2_moe.py", "llada-moe": "modeling_lladamoe.py", "coda": "modeling_coda.py"}


def write_tiny_block_checkpoint(folder: Path, layout: str, *, seed: int = 0, dim: int = 64, n_layers: int = 2,
                                n_heads: int = 4, n_kv_heads: int = 2, ffn_dim: int = 96, shards: int = 2,
                                block_size: int = 4, sub_block_size: int = 2) -> Path:
    if layout not in BLOCK_LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; one of {BLOCK_LAYOUTS}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    family = FAMILY_OF[layout]
    tok = tiny_tokenizer(SPECIALS[layout])
    ids = {t: tok.token_to_id(t) for t in SPECIALS[layout]}
    rows = int(math.ceil((tok.get_vocab_size() + 1) / 64) * 64)   # embeddings padded past the tokenizer
    config = _config(layout, ids, rows, dim, n_layers, n_heads, n_kv_heads, ffn_dim, block_size, sub_block_size)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    _write_tokenizer(folder, layout, tok, ids)
    cfg = block_config(family, config)
    _write_weights(folder, family, cfg, seed, shards, list(ids.values()))
    (folder / TRAP_FILE[layout]).write_text(TRAP_CODE)
    return folder


def _config(layout, ids, rows, dim, n_layers, n_heads, n_kv_heads, ffn_dim, block_size, sub_block_size) -> dict:
    eos = ids[EOS_TEXT.get(layout, "<|endoftext|>")]
    base = {
        "hidden_size": dim, "intermediate_size": ffn_dim, "num_attention_heads": n_heads,
        "num_key_value_heads": n_kv_heads, "num_hidden_layers": n_layers, "vocab_size": rows,
        "head_dim": dim // n_heads, "max_position_embeddings": 32768, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "rope_scaling": None, "tie_word_embeddings": False, "attention_dropout": 0.0,
        "initializer_range": 0.02, "torch_dtype": "bfloat16", "use_cache": True, "eos_token_id": eos,
    }
    mask = ids[MASK_TEXT[layout]]
    moe = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
    if layout == "sdar":
        return {"architectures": ["SDARForCausalLM"], "model_type": "sdar",
                "auto_map": {"AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"}, **base,
                "attention_bias": False, "pad_token_id": eos, "bos_token_id": eos, "block_size": block_size}
    if layout == "sdar-moe":
        return {"architectures": ["SDARMoeForCausalLM"], "model_type": "sdar_moe",
                "auto_map": {"AutoModelForCausalLM": "modeling_sdar_moe.SDARMoeForCausalLM"}, **base, **moe,
                "attention_bias": False, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [0],
                "pad_token_id": eos, "block_size": block_size}
    if layout == "stable-diffcoder":
        return {"architectures": ["StableDiffCoderForCausalLM"], "model_type": "stable_diffcoder",
                "auto_map": {"AutoModelForCausalLM": "modeling_stable_diffcoder.StableDiffCoderForCausalLM"},
                **base, "attention_bias": False, "mlp_bias": False, "bos_token_id": ids["<[begin▁of▁sentence]>"],
                "pad_token_id": ids["<[PAD▁TOKEN]>"], "mask_token_id": mask, "block_size": block_size}
    if layout == "fast-dllm-v2":
        return {"architectures": ["Fast_dLLM_QwenForCausalLM"], "model_type": "Fast_dLLM_Qwen",
                "auto_map": {"AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM"}, **base,
                "bd_size": block_size, "small_block_size": sub_block_size, "use_sliding_window": False,
                "mask_token_id": mask, "bos_token_id": eos}
    if layout == "llada2":
        return {"architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe",
                "auto_map": {"AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM"}, **base, **moe,
                "num_shared_experts": 1, "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5,
                "first_k_dense_replace": 1, "score_function": "sigmoid", "use_qk_norm": True, "use_qkv_bias": False,
                "use_bias": False, "partial_rotary_factor": 0.5, "mask_token_id": mask, "pad_token_id": eos,
                "block_size": block_size}
    if layout == "llada-moe":
        base = {k: v for k, v in base.items() if k != "intermediate_size"}
        return {"architectures": ["LLaDAMoeModelLM"], "model_type": "llada_moe",
                "auto_map": {"AutoModel": "modeling_lladamoe.LLaDAMoeModelLM"}, **base, "num_experts": 8,
                "num_experts_per_tok": 2, "expert_intermediate_size": 32, "norm_topk_prob": False,
                "qk_layernorm": True, "attention_bias": False, "mask_token_id": mask, "pad_token_id": eos}
    return {"architectures": ["CoDALanguageModel"], "model_type": "CoDA",
            "auto_map": {"AutoModelForCausalLM": "modeling_coda.CoDALanguageModel"}, **base,
            "attention_bias": False, "mask_token_id": mask, "pad_token_id": eos, "bos_token_id": eos}


def _write_tokenizer(folder: Path, layout: str, tok, ids: dict[str, int]) -> None:
    eos = EOS_TEXT.get(layout, "<|endoftext|>")
    declared = {"eos_token": eos, "pad_token": "<[PAD▁TOKEN]>" if layout == "stable-diffcoder" else eos}
    if layout not in ("sdar", "sdar-moe"):
        declared["mask_token"] = MASK_TEXT[layout]
    added = {str(i): {"content": t, "special": True, "lstrip": False, "rstrip": False, "normalized": False,
                      "single_word": False} for t, i in ids.items()}
    config = {"added_tokens_decoder": added, **declared, "model_max_length": 32768,
              "clean_up_tokenization_spaces": False, "tokenizer_class": "PreTrainedTokenizerFast"}
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps(declared, indent=2, ensure_ascii=False) + "\n")


def _write_weights(folder: Path, family: BlockFamily, cfg, seed: int, shards: int, special_ids: list[int]) -> None:
    generator = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for groups, _ in weight_plan(family, cfg).values():
        for group in groups:
            for name, shape in group:
                noise = torch.randn(shape, generator=generator)
                if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                    tensors[name] = 1.0 + 0.1 * noise      # not all ones, so a swapped norm would show
                elif name.endswith(".bias") or name.endswith("expert_bias"):
                    tensors[name] = 0.05 * noise
                elif "embed_tokens" in name or "word_embeddings" in name:
                    tensors[name] = 0.48 * noise            # wide embeddings: greedy choices vary by position
                elif name.endswith("gate.weight"):
                    tensors[name] = 0.5 * noise             # routers that pick different experts per token
                else:
                    tensors[name] = 0.08 * noise
    head = tensors.get("lm_head.weight")
    if head is not None:
        for special in special_ids:     # special tokens rarely win in a random model (spans do not end at once)
            head[special].mul_(0.1)
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    write_safetensors(folder, tensors, shards)


__all__ = ["BLOCK_LAYOUTS", "EXECUTED_MARKER", "write_tiny_block_checkpoint"]

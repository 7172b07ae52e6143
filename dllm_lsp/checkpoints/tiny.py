"""Tiny random checkpoint folders in each family's exact file and tensor-name layout, for tests.

What is real: the file names (config.json, model-0000i-of-0000n.safetensors + index, the
tokenizer files each family ships), the config keys and the tensor names. What is tiny: the
shapes, and the vocabulary -- a byte-level BPE trained on this package's sources with the
family's special tokens appended, so the mask id is a few hundred, not 126336 / 151666; the
config files carry those small ids the same way the real ones carry the large ids, and the
loader reads them from there. Dream-style folders also get a `modeling_dream.py` and
`tokenization_dream.py` that would leave a marker file if anything ever executed them.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from dllm_lsp.arch.tiny import sample_corpus

from .architecture import BiConfig, BidirectionalLM
from .families import DREAM, DREAMON, LLADA, OPEN_DCODER, Family, tensor_names

LAYOUTS = ("llada", "dream", "diffucoder", "dreamon", "open-dcoder")
FAMILY_OF = {"llada": LLADA, "dream": DREAM, "diffucoder": DREAM, "dreamon": DREAMON, "open-dcoder": OPEN_DCODER}
EXECUTED_MARKER = "EXECUTED_FOLDER_CODE"

SPECIALS = {   # in the order the real vocabularies have them
    "llada": ["<|startoftext|>", "<|endoftext|>", "<|eot_id|>", "<|mdm_mask|>"],
    "dream": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>"],
    "diffucoder": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>", "<|dlm_pad|>"],
    "dreamon": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>", "<|mask|>", "<|expand|>"],
    "open-dcoder": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"],
}

TRAP_CODE = (
    "# Written by dllm_lsp.checkpoints.tiny: loading this folder must never run this file.\n"
    "import pathlib\n"
    f"pathlib.Path(__file__).with_name({EXECUTED_MARKER!r}).write_text('executed')\n"
)


def tiny_tokenizer(specials: list[str], vocab_size: int = 320) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(sample_corpus(), trainer=trainer)
    tokenizer.add_special_tokens(specials)
    return tokenizer


def write_tiny_checkpoint(folder: Path, layout: str, *, seed: int = 0, dim: int = 64, n_layers: int = 2,
                          n_heads: int = 4, n_kv_heads: int = 2, ffn_dim: int = 128, shards: int = 2,
                          dtype: torch.dtype = torch.float32, tokenizer: Tokenizer | None = None) -> Path:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; one of {LAYOUTS}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    family = FAMILY_OF[layout]
    tok = tokenizer or tiny_tokenizer(SPECIALS[layout])
    ids = {t: tok.token_to_id(t) for t in SPECIALS[layout]}
    # Real vocabularies pad the embedding past the tokenizer (152064 rows for 151665 tokens).
    rows = int(math.ceil((tok.get_vocab_size() + 1) / 64) * 64)
    cfg = BiConfig(vocab_size=rows, dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                   head_dim=dim // n_heads, ffn_dim=ffn_dim, rope_theta=10000.0, norm_eps=1e-5 if family is LLADA else 1e-6,
                   qkv_bias=family is not LLADA, tied_embeddings=layout == "open-dcoder")
    (folder / "config.json").write_text(json.dumps(_config(layout, cfg, ids), indent=2) + "\n")
    _write_tokenizer(folder, layout, tok, ids)
    _write_weights(folder, family, cfg, seed, shards, dtype, [ids[t] for t in ids])
    if layout in ("dream", "dreamon", "diffucoder"):
        for name in ("modeling_dream.py", "configuration_dream.py", "tokenization_dream.py", "generation_utils.py"):
            (folder / name).write_text(TRAP_CODE)
        (folder / "generation_config.json").write_text(json.dumps(_generation_config(layout, ids), indent=2) + "\n")
    if layout == "llada":
        (folder / "modeling_llada.py").write_text(TRAP_CODE)
    return folder


def _config(layout: str, cfg: BiConfig, ids: dict[str, int]) -> dict:
    if layout == "llada":
        return {
            "architectures": ["LLaDAModelLM"], "auto_map": {"AutoModel": "modeling_llada.LLaDAModelLM"},
            "model_type": "llada", "activation_type": "silu", "alibi": False, "attention_layer_norm": False,
            "block_group_size": 1, "block_type": "llama", "d_model": cfg.dim, "embedding_size": cfg.vocab_size,
            "include_bias": False, "include_qkv_bias": False, "input_emb_norm": False, "layer_norm_type": "rms",
            "max_sequence_length": 4096, "mlp_hidden_size": cfg.ffn_dim, "mlp_ratio": 4, "n_heads": cfg.n_heads,
            "n_kv_heads": cfg.n_kv_heads, "n_layers": cfg.n_layers, "rms_norm_eps": cfg.norm_eps, "rope": True,
            "rope_full_precision": True, "rope_theta": cfg.rope_theta, "scale_logits": False,
            "vocab_size": cfg.vocab_size, "weight_tying": False, "use_cache": False,
            "mask_token_id": ids["<|mdm_mask|>"], "eos_token_id": ids["<|endoftext|>"],
            "pad_token_id": ids["<|endoftext|>"], "bos_token_id": ids["<|startoftext|>"], "torch_dtype": "bfloat16",
        }
    qwen = {
        "hidden_size": cfg.dim, "intermediate_size": cfg.ffn_dim, "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads, "num_hidden_layers": cfg.n_layers, "vocab_size": cfg.vocab_size,
        "max_position_embeddings": 131072, "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.norm_eps,
        "hidden_act": "silu", "rope_scaling": None, "tie_word_embeddings": cfg.tied_embeddings,
        "use_sliding_window": False, "attention_dropout": 0.0, "initializer_range": 0.02, "torch_dtype": "bfloat16",
        "eos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"],
    }
    if layout == "open-dcoder":
        return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **qwen,
                "bos_token_id": ids["<|endoftext|>"]}
    dream = {"architectures": ["DreamModel"], "model_type": "Dream",
             "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
             **qwen, "mask_token_id": ids["<|mask|>"], "bos_token_id": ids["<|beginoftext|>"]}
    return dream


def _generation_config(layout: str, ids: dict[str, int]) -> dict:
    gen = {"mask_token_id": ids["<|mask|>"], "eos_token_id": ids["<|endoftext|>"], "pad_token_id": ids["<|endoftext|>"],
           "bos_token_id": ids["<|beginoftext|>"]}
    if layout == "dreamon":
        gen["expand_token_id"] = ids["<|expand|>"]
        gen["delete_token_id"] = ids["<|endoftext|>"]
    return gen


def _write_tokenizer(folder: Path, layout: str, tok: Tokenizer, ids: dict[str, int]) -> None:
    if layout == "llada":
        declared = {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
    elif layout == "diffucoder":
        declared = {"eos_token": "<|endoftext|>", "pad_token": "<|dlm_pad|>", "mask_token": "<|mask|>",
                    "bos_token": "<|beginoftext|>"}
    elif layout == "open-dcoder":
        declared = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>"}
    else:
        declared = {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "mask_token": "<|mask|>",
                    "bos_token": "<|beginoftext|>"}
    added = {str(i): {"content": t, "special": True, "lstrip": False, "rstrip": False, "normalized": False,
                      "single_word": False} for t, i in ids.items()}
    tokenizer_config = {"added_tokens_decoder": added, **declared, "model_max_length": 131072,
                        "clean_up_tokenization_spaces": False}
    if layout in ("dream", "dreamon"):
        # Dream ships Qwen2 BPE files and a custom tokenizer class (never executed here).
        tok.model.save(str(folder))
        tokenizer_config.update({"tokenizer_class": "DreamTokenizer",
                                 "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]}})
    else:
        tok.save(str(folder / "tokenizer.json"))
        tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast" if layout == "llada" else "Qwen2Tokenizer"
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(json.dumps(declared, indent=2) + "\n")


def _write_weights(folder: Path, family: Family, cfg: BiConfig, seed: int, shards: int, dtype: torch.dtype,
                   special_ids: list[int]) -> None:
    torch.manual_seed(seed)
    model = BidirectionalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))     # not all-ones, so a swapped norm would show
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.05)
            else:
                p.normal_(0.0, 0.08)
        model.embed.weight.mul_(6.0)   # wide embeddings: greedy choices differ by position in a random model
        head = model.embed.weight if model.lm_head is None else model.lm_head.weight
        for special in special_ids:    # special tokens rarely win in a random model (spans do not end at once)
            head[special].mul_(0.1)
    names = tensor_names(family, cfg)
    tensors = {names[k]: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items() if k in names}
    write_safetensors(folder, tensors, shards)


def write_safetensors(folder: Path, tensors: dict[str, torch.Tensor], shards: int) -> None:
    """`tensors` as model.safetensors, or as `shards` files (names dealt round-robin in sorted order)
    with the model.safetensors.index.json that Hugging Face folders carry."""
    if shards <= 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    ordered = sorted(tensors)
    weight_map, total = {}, 0
    for i in range(shards):
        shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        group = ordered[i::shards]
        save_file({n: tensors[n] for n in group}, str(folder / shard), metadata={"format": "pt"})
        for n in group:
            weight_map[n] = shard
            total += tensors[n].numel() * tensors[n].element_size()
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")

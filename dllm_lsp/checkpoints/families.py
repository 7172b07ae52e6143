"""The supported checkpoint families: how to recognise each from config.json, read its shape,
name its tensors and find its special tokens.

| family      | config.json                                  | layers | logits          |
|-------------|----------------------------------------------|--------|-----------------|
| llada       | model_type "llada" / LLaDAModelLM            | Llama  | same position   |
| dream       | model_type "Dream" / DreamModel              | Qwen2  | shifted by one  |
| dreamon     | Dream + an expand token (151667)             | Qwen2  | shifted by one  |
| open-dcoder | model_type "qwen2" + a mask token            | Qwen2  | shifted by one  |

Dream-v0-Base/Instruct-7B, Dream-Coder-v0-7B and DiffuCoder-7B (base and instruct) are all
"dream": the same DreamModel files with different weights and tokenizers.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dllm_lsp.engine.denoiser import SpecialTokens
from dllm_lsp.model_folder import ModelLoadError, load_json_file

from .architecture import BiConfig
from .block_families import BLOCK_FAMILIES
from .config_values import MAX_LAYERS, check_shape, flag, head_width, need, optional
from .tokenizer_files import TokenizerFiles, check_vocabulary

EXPAND_TOKEN = "<|expand|>"
DELETE_TOKEN = "<|delete|>"


@dataclass(frozen=True)
class Family:
    key: str
    title: str              # what the user sees in messages and `describe()`
    layers: str             # "llama" (LLaDA names) or "qwen2" (Dream / Qwen2 names)
    shift: int              # 1: logits at position p predict token p+1 (Dream's training); 0: LLaDA
    prepend_bos: bool       # the family's reference infilling code starts the canvas with BOS


LLADA = Family("llada", "LLaDA (LLaDA-8B-Base, LLaDA-8B-Instruct, LLaDA-1.5)", "llama", 0, True)
DREAM = Family("dream", "Dream (Dream-v0-Base/Instruct-7B, Dream-Coder-v0-7B, DiffuCoder-7B)", "qwen2", 1, False)
DREAMON = Family("dreamon", "DreamOn (DreamOn-v0-7B, variable-length infilling)", "qwen2", 1, True)
OPEN_DCODER = Family("open-dcoder", "Open-dCoder (open-dcoder-0.5B)", "qwen2", 1, False)
FAMILIES = (LLADA, DREAM, DREAMON, OPEN_DCODER)


def supported_list() -> str:
    return "; ".join(f.title for f in FAMILIES + BLOCK_FAMILIES)


def read_generation_config(folder: Path) -> dict:
    path = folder / "generation_config.json"
    if not path.is_file():
        return {}
    data = load_json_file(path)
    return data if isinstance(data, dict) else {}


def detect_family(config: dict, generation: dict, tokens: TokenizerFiles | None) -> Family:
    """The family of a config.json, or ModelLoadError listing the supported ones."""
    model_type = str(config.get("model_type", "")).lower()
    archs = config.get("architectures") or []
    archs = [str(a) for a in archs] if isinstance(archs, list) else [str(archs)]
    if model_type == "llada" or "LLaDAModelLM" in archs:
        return LLADA
    if model_type == "dream" or "DreamModel" in archs:
        has_expand = "expand_token_id" in config or "expand_token_id" in generation
        if has_expand or (tokens is not None and tokens.token_id(EXPAND_TOKEN) is not None):
            return DREAMON
        return DREAM
    if model_type == "qwen2" or "Qwen2ForCausalLM" in archs:
        has_mask = "mask_token_id" in config or "mask_token_id" in generation
        if has_mask or (tokens is not None and tokens.id_of("mask_token") is not None):
            return OPEN_DCODER
        raise ModelLoadError(
            "this Qwen2 folder declares no mask token, so it is an autoregressive model, not a diffusion one; "
            f"supported families: {supported_list()}"
        )
    found = config.get("model_type") or archs or "nothing"
    raise ModelLoadError(f"unsupported model family {found!r} in config.json; supported families: {supported_list()}")




def model_config(family: Family, config: dict) -> BiConfig:
    """The transformer shape from config.json, refusing variants this runtime does not implement."""
    if family.layers == "llama":
        return _llada_config(config)
    return _qwen2_config(family, config)


def _llada_config(c: dict) -> BiConfig:
    f = LLADA.key
    for key, want in (("block_type", "llama"), ("layer_norm_type", "rms"), ("activation_type", "silu")):
        if key in c and str(c[key]).lower() != want:
            raise ModelLoadError(f"LLaDA variant with {key}={c[key]!r} is not supported (only {want!r})")
    if c.get("alibi") or c.get("rope") is False or c.get("attention_layer_norm"):
        raise ModelLoadError("LLaDA variants with ALiBi, no RoPE or q/k layer norms are not supported")
    if c.get("block_group_size", 1) not in (1, None):
        raise ModelLoadError("LLaDA checkpoints with block_group_size > 1 are not supported")
    dim = need(c, "d_model", f)
    heads = need(c, "n_heads", f)
    head_dim = head_width(c, dim, heads, "d_model", "n_heads", key=None)   # LLaDA configs name no head_dim
    bias = flag(c, "include_bias", False)
    return shaped(BiConfig(
        vocab_size=optional(c, "embedding_size", None) or need(c, "vocab_size", f),
        dim=dim, n_layers=need(c, "n_layers", f, high=MAX_LAYERS), n_heads=heads,
        n_kv_heads=optional(c, "n_kv_heads", heads), head_dim=head_dim,
        ffn_dim=optional(c, "mlp_hidden_size", None) or optional(c, "mlp_ratio", 4) * dim,
        rope_theta=optional(c, "rope_theta", 10000.0, float), norm_eps=optional(c, "rms_norm_eps", 1e-5, float),
        qkv_bias=bias or flag(c, "include_qkv_bias", False), out_bias=bias, mlp_bias=bias,
        tied_embeddings=flag(c, "weight_tying", False),
        embed_scale=dim**0.5 if c.get("input_emb_norm") else 1.0,
        logit_scale=dim**-0.5 if c.get("scale_logits") else 1.0,
    ))


def _qwen2_config(family: Family, c: dict) -> BiConfig:
    if c.get("rope_scaling") not in (None, {}):
        raise ModelLoadError(f"rope_scaling {c['rope_scaling']!r} is not supported")
    if str(c.get("hidden_act", "silu")) != "silu":
        raise ModelLoadError(f"hidden_act {c['hidden_act']!r} is not supported (only 'silu')")
    f = family.key
    dim = need(c, "hidden_size", f)
    heads = need(c, "num_attention_heads", f)
    return shaped(BiConfig(
        vocab_size=need(c, "vocab_size", f), dim=dim, n_layers=need(c, "num_hidden_layers", f, high=MAX_LAYERS),
        n_heads=heads, n_kv_heads=optional(c, "num_key_value_heads", heads),
        head_dim=head_width(c, dim, heads, "hidden_size", "num_attention_heads"),
        ffn_dim=need(c, "intermediate_size", f),
        rope_theta=optional(c, "rope_theta", 10000.0, float), norm_eps=optional(c, "rms_norm_eps", 1e-6, float),
        qkv_bias=True, tied_embeddings=flag(c, "tie_word_embeddings", False),
    ))


def shaped(cfg: BiConfig) -> BiConfig:
    check_shape({"vocab_size": cfg.vocab_size, "dim": cfg.dim, "n_layers": cfg.n_layers, "n_heads": cfg.n_heads,
                 "n_kv_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "ffn_dim": cfg.ffn_dim})
    return cfg


def max_context(family: Family, config: dict) -> int:
    key = "max_sequence_length" if family.layers == "llama" else "max_position_embeddings"
    return optional(config, key, 4096)


def tensor_names(family: Family, cfg: BiConfig) -> dict[str, str]:
    """Our parameter name -> the checkpoint's tensor name (the families' real names)."""
    llama = family.layers == "llama"
    top = "model.transformer." if llama else "model."
    names = {"embed.weight": top + ("wte.weight" if llama else "embed_tokens.weight"),
             "norm.weight": top + ("ln_f.weight" if llama else "norm.weight")}
    if not cfg.tied_embeddings:
        names["lm_head.weight"] = "model.transformer.ff_out.weight" if llama else "lm_head.weight"
    for i in range(cfg.n_layers):
        ours = f"layers.{i}."
        if llama:
            block = f"model.transformer.blocks.{i}."
            parts = {"attn_norm": "attn_norm", "attn.q_proj": "q_proj", "attn.k_proj": "k_proj",
                     "attn.v_proj": "v_proj", "attn.o_proj": "attn_out", "mlp_norm": "ff_norm",
                     "mlp.gate_proj": "ff_proj", "mlp.up_proj": "up_proj", "mlp.down_proj": "ff_out"}
        else:
            block = f"model.layers.{i}."
            parts = {"attn_norm": "input_layernorm", "attn.q_proj": "self_attn.q_proj",
                     "attn.k_proj": "self_attn.k_proj", "attn.v_proj": "self_attn.v_proj",
                     "attn.o_proj": "self_attn.o_proj", "mlp_norm": "post_attention_layernorm",
                     "mlp.gate_proj": "mlp.gate_proj", "mlp.up_proj": "mlp.up_proj", "mlp.down_proj": "mlp.down_proj"}
        for mine, theirs in parts.items():
            names[f"{ours}{mine}.weight"] = f"{block}{theirs}.weight"
        biased = []
        if cfg.qkv_bias:
            biased += ["attn.q_proj", "attn.k_proj", "attn.v_proj"]
        if cfg.out_bias:
            biased.append("attn.o_proj")
        if cfg.mlp_bias:
            biased += ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
        for mine in biased:
            names[f"{ours}{mine}.bias"] = f"{block}{parts[mine]}.bias"
    return names


def _first_id(value) -> int | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def config_token_id(key: str, *sources: dict) -> int | None:
    """The first token id `key` names in `sources` (config.json, then generation_config.json);
    a list (several EOS ids) gives its first."""
    for source in sources:
        found = _first_id(source.get(key))
        if found is not None:
            return found
    return None


def special_tokens(config: dict, generation: dict, tokens: TokenizerFiles, vocab_rows: int, *,
                   prepend_bos: bool = False, mask_texts: tuple[str, ...] = (), default_mask: int | None = None,
                   expand: bool = False) -> SpecialTokens:
    """Mask, in-slot end, BOS and expand ids from config.json, generation_config.json and the
    tokenizer: the one resolver of every family (masked-diffusion families.py, block-diffusion
    block_loader.py), the families' differences passed in as fallbacks.

    Order: config.json, then generation_config.json, then the tokenizer's declared token. The mask
    then by `mask_texts` (the usual spellings, looked up when nothing declares it: SDAR's
    `<|MASK|>`), and last `default_mask`, the id a family's reference sampler hard-codes (Fast-dLLM
    v2's 151665 is not in its tokenizer), if the embedding has that row. The in-slot pad prefers
    the tokenizer's pad token (DiffuCoder pads spans with <|dlm_pad|> while its config.json says
    <|endoftext|>). BOS where the tokenizer adds one or `prepend_bos` (the family's reference
    infilling starts the canvas with it). `expand`: the family grows slots (DreamOn): its expand
    token is required, and so is an EOS (its delete token). First, every id the tokenizer can give
    text must have an embedding row (`check_vocabulary`).
    """
    def from_configs(key: str) -> int | None:
        return config_token_id(key, config, generation)

    check_vocabulary(tokens.tokenizer, vocab_rows)
    mask = from_configs("mask_token_id")
    declared = tokens.id_of("mask_token")
    if mask is None:
        mask = declared
    if mask is None:
        mask = next((tokens.token_id(t) for t in mask_texts if tokens.token_id(t) is not None), None)
    if mask is None and default_mask is not None and default_mask < vocab_rows:
        mask = default_mask
    if mask is None:
        if mask_texts:
            raise ModelLoadError("no mask token: config.json has no mask_token_id, the tokenizer declares no "
                                 f"mask_token and has none of {', '.join(mask_texts)}")
        raise ModelLoadError("no mask token: config.json has no mask_token_id and the tokenizer declares no mask_token")
    if declared is not None and declared != mask:
        raise ModelLoadError(
            f"config.json says mask_token_id {mask}, but the tokenizer maps its mask token "
            f"{tokens.special['mask_token']!r} to {declared}: the folder's files disagree"
        )
    eos = from_configs("eos_token_id")
    if eos is None:
        eos = tokens.id_of("eos_token")
    pad = tokens.id_of("pad_token")
    if pad is None:
        pad = from_configs("pad_token_id")
    bos = None
    if prepend_bos or tokens.add_bos:
        bos = from_configs("bos_token_id")
        if bos is None:
            bos = tokens.id_of("bos_token")
    expand_id = None
    if expand:
        expand_id = from_configs("expand_token_id")
        if expand_id is None:
            expand_id = tokens.token_id(EXPAND_TOKEN)
        if expand_id is None:
            raise ModelLoadError("DreamOn folder without an expand token id")
        if eos is None:
            raise ModelLoadError("DreamOn needs an EOS id (its delete token): config.json has no eos_token_id")
    ids = {"mask": mask, "eos": eos, "pad": pad, "bos": bos, "expand": expand_id}
    for role, value in ids.items():
        if value is not None and not 0 <= value < vocab_rows:
            raise ModelLoadError(f"{role} token id {value} is outside the {vocab_rows}-row embedding")
    if pad == mask:
        pad = None
    return SpecialTokens(mask_id=mask, pad_id=pad, eos_id=eos, bos_id=bos, expand_id=expand_id)


def delete_token(config: dict, generation: dict, tokens: TokenizerFiles, special: SpecialTokens) -> int:
    """DreamOn's delete token: `delete_token_id` if a config names one, a `<|delete|>` token, else EOS
    (DreamOn-v0 pads the middle with EOS during training and deletes positions that predict it)."""
    for source in (config, generation):
        found = _first_id(source.get("delete_token_id"))
        if found is not None:
            return found
    found = tokens.token_id(DELETE_TOKEN)
    return found if found is not None else special.eos_id

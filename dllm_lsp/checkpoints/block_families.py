"""The block-diffusion and newer open diffusion coders: how to recognise each from config.json,
read its shape, and name its tensors.

| family           | config.json (`architectures` / `model_type`)       | layers            | attention      | logits    |
|------------------|----------------------------------------------------|-------------------|----------------|-----------|
| sdar             | SDARForCausalLM / sdar                             | Qwen3             | block-causal 4 | same pos. |
| sdar-moe         | SDARMoeForCausalLM / sdar_moe                      | Qwen3-MoE         | block-causal 4 | same pos. |
| stable-diffcoder | *DiffCoder* / *diffcoder*                          | Llama (Seed-Coder)| block-causal 4 | same pos. |
| fast-dllm-v2     | Fast_dLLM_QwenForCausalLM / fast_dllm_qwen         | Qwen2.5           | block 32, sub-blocks 8 | shifted by one |
| llada2           | LLaDA2MoeModelLM / llada2_moe                      | Ling MoE          | block-causal 32| same pos. |
| llada-moe        | LLaDAMoeModelLM / llada_moe                        | Qwen3-MoE-shaped  | bidirectional  | same pos. |
| coda             | CoDALanguageModel / coda                           | Qwen3             | bidirectional  | shifted by one |

TraDo (Gen-Verse) ships SDAR's files and is loaded as SDAR. The block size is read from
config.json (`block_size`, `bd_size`, `block_length`), else generation_config.json, else the
family's published default.
"""
from __future__ import annotations

from dataclasses import dataclass

from dllm_lsp.model_folder import ModelLoadError

from .block_model import BlockConfig, MoEConfig
from .config_values import MAX_LAYERS, MAX_SIZE, check_shape, flag, head_width, need, optional

BLOCK, BIDIRECTIONAL = "block", "bidirectional"


@dataclass(frozen=True)
class BlockFamily:
    key: str
    title: str                      # what the user sees in messages and `describe()`
    layout: str                     # qwen3 | qwen2 | llama | qwen3_moe | llada_moe | llada2_moe
    attention: str                  # BLOCK or BIDIRECTIONAL
    shift: int                      # 1: logits at position p predict token p+1
    block_size: int = 0             # default block length (block-causal families)
    sub_block_size: int | None = None   # Fast-dLLM v2 decodes a block in sub-blocks, left to right
    architectures: tuple[str, ...] = ()
    model_types: tuple[str, ...] = ()
    default_mask: int | None = None     # the mask id the reference sampler hard-codes (used when the folder names none)


SDAR = BlockFamily("sdar", "SDAR / TraDo (SDAR-1.7B/4B/8B-Chat, TraDo-4B/8B-Instruct)", "qwen3", BLOCK, 0, 4,
                   architectures=("SDARForCausalLM",), model_types=("sdar",), default_mask=151669)
SDAR_MOE = BlockFamily("sdar-moe", "SDAR-MoE (SDAR-30B-A3B-Chat, TraDo-30B-A3B)", "qwen3_moe", BLOCK, 0, 4,
                       architectures=("SDARMoeForCausalLM",), model_types=("sdar_moe",), default_mask=151669)
STABLE_DIFFCODER = BlockFamily("stable-diffcoder", "Stable-DiffCoder (Stable-DiffCoder-8B-Base/-Instruct)", "llama",
                               BLOCK, 0, 4, architectures=("StableDiffCoderForCausalLM", "StableDiffcoderForCausalLM"),
                               model_types=("stable_diffcoder", "stable-diffcoder", "stablediffcoder"))
FAST_DLLM_V2 = BlockFamily("fast-dllm-v2", "Fast-dLLM v2 (Fast_dLLM_v2_1.5B, Fast_dLLM_v2_7B)", "qwen2", BLOCK, 1, 32,
                           sub_block_size=8, architectures=("Fast_dLLM_QwenForCausalLM",),
                           model_types=("fast_dllm_qwen", "fast_dllm"), default_mask=151665)
LLADA2 = BlockFamily("llada2", "LLaDA2.0 (LLaDA2.0-mini, LLaDA2.0-flash; MoE)", "llada2_moe", BLOCK, 0, 32,
                     architectures=("LLaDA2MoeModelLM",), model_types=("llada2_moe",), default_mask=156895)
LLADA_MOE = BlockFamily("llada-moe", "LLaDA-MoE (LLaDA-MoE-7B-A1B-Base/-Instruct)", "llada_moe", BIDIRECTIONAL, 0,
                        architectures=("LLaDAMoeModelLM", "LLaDAMoEModelLM"), model_types=("llada_moe", "lladamoe"))
CODA = BlockFamily("coda", "CoDA (CoDA-v0-Base/-Instruct 1.7B; CC-BY-NC-4.0)", "qwen3", BIDIRECTIONAL, 1,
                   architectures=("CoDALanguageModel",), model_types=("coda", "coda_model"), default_mask=151669)

BLOCK_FAMILIES = (SDAR, SDAR_MOE, STABLE_DIFFCODER, FAST_DLLM_V2, LLADA2, LLADA_MOE, CODA)


def detect_block_family(config: dict) -> BlockFamily | None:
    """The family of a config.json if it is one of these, else None (an older family, or unsupported)."""
    model_type = str(config.get("model_type", "")).lower()
    archs = config.get("architectures") or []
    archs = [str(a) for a in archs] if isinstance(archs, list) else [str(archs)]
    for family in BLOCK_FAMILIES:
        if model_type in family.model_types or any(a in family.architectures for a in archs):
            return family
    if "diffcoder" in model_type or any("diffcoder" in a.lower() for a in archs):
        return STABLE_DIFFCODER
    return None




def _layer_list(c: dict, key: str) -> list[int]:
    """A list of layer indices (Qwen3-MoE's `mlp_only_layers`), each a JSON integer."""
    value = c.get(key) or []
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        raise ModelLoadError(f"config.json {key!r} must be a list of layer numbers, not {value!r}")
    return value


def _first(config: dict, keys: tuple[str, ...], default=None):
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return default


def block_config(family: BlockFamily, c: dict) -> BlockConfig:
    """The transformer shape from config.json, refusing variants this runtime does not implement."""
    if c.get("rope_scaling") not in (None, {}):
        raise ModelLoadError(f"rope_scaling {c['rope_scaling']!r} is not supported (plain RoPE only)")
    if str(c.get("hidden_act", "silu")) != "silu":
        raise ModelLoadError(f"hidden_act {c['hidden_act']!r} is not supported (only 'silu')")
    if c.get("mlp_bias"):
        raise ModelLoadError("MLP biases (mlp_bias: true) are not supported")
    f = family.key
    dim = need(c, "hidden_size", f)
    heads = need(c, "num_attention_heads", f)
    head_dim = head_width(c, dim, heads, "hidden_size", "num_attention_heads")
    layers = need(c, "num_hidden_layers", f, high=MAX_LAYERS)
    layout = family.layout
    attention_bias = flag(c, "attention_bias", False)
    common = dict(
        vocab_size=need(c, "vocab_size", f), dim=dim, n_layers=layers, n_heads=heads,
        n_kv_heads=optional(c, "num_key_value_heads", heads), head_dim=head_dim,
        ffn_dim=optional(c, "intermediate_size", 0, low=0),   # none: all MoE
        rope_theta=optional(c, "rope_theta", 10000.0, float), norm_eps=optional(c, "rms_norm_eps", 1e-6, float),
        tied_embeddings=flag(c, "tie_word_embeddings", False),
    )
    try:
        check_shape({k: v for k, v in common.items() if k in ("vocab_size", "n_layers", "n_kv_heads", "head_dim")})
    except ValueError as exc:
        raise ModelLoadError(f"config.json describes an impossible shape: {exc}") from exc
    moe = None
    dense: tuple[int, ...] = ()
    if layout == "qwen2":
        attn = dict(qkv_bias=True)
    elif layout == "llama":
        attn = dict(qkv_bias=attention_bias, out_bias=attention_bias)
    elif layout in ("qwen3", "qwen3_moe"):
        attn = dict(qkv_bias=attention_bias, out_bias=attention_bias, qk_norm=True)
    elif layout == "llada_moe":
        attn = dict(qkv_bias=attention_bias, qk_norm=flag(c, "qk_layernorm", True))
    else:   # llada2_moe; the defaults are LLaDA2MoeConfig's (a key config.json leaves out means them)
        if c.get("norm_head"):
            raise ModelLoadError("LLaDA2.0 with a normalised LM head (norm_head: true) is not supported")
        factor = optional(c, "partial_rotary_factor", 0.5, float, high=1)
        rotary = int(head_dim * factor)     # as LLaDA2's own code rounds it
        if rotary < 2 or rotary % 2:
            # Refused here, naming the key: BlockConfig's own check said "impossible shape" of a
            # rotary dimension the config never names.
            raise ModelLoadError(f"config.json 'partial_rotary_factor' {factor} rotates {rotary} of a head's {head_dim} "
                                 "channels: rotary position embeddings need an even number of them, at least 2")
        attn = dict(qkv_bias=flag(c, "use_qkv_bias", False), out_bias=flag(c, "use_bias", True),
                    qk_norm=flag(c, "use_qk_norm", True), rotary_dim=rotary)
    if layout == "qwen3_moe":
        moe = MoEConfig(n_experts=need(c, "num_experts", f), top_k=need(c, "num_experts_per_tok", f),
                        ffn_dim=need(c, "moe_intermediate_size", f), norm_topk=flag(c, "norm_topk_prob", False))
        step = optional(c, "decoder_sparse_step", 1, high=MAX_LAYERS)
        only = set(_layer_list(c, "mlp_only_layers"))
        dense = tuple(i for i in range(layers) if i in only or (i + 1) % step != 0)
    elif layout == "llada_moe":
        for key in ("num_shared_experts", "shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"):
            if c.get(key):
                raise ModelLoadError(f"LLaDA-MoE with shared experts ({key}={c[key]!r}) is not supported")
        score = str(_first(c, ("score_func", "moe_router_score_function", "scoring_func"), "softmax")).lower()
        if score != "softmax":
            raise ModelLoadError(f"LLaDA-MoE with a {score!r} router is not supported (softmax only)")
        moe = MoEConfig(n_experts=need(c, "num_experts", f), top_k=need(c, "num_experts_per_tok", f),
                        ffn_dim=optional(c, "expert_intermediate_size", None)
                        or need(c, "moe_intermediate_size" if c.get("moe_intermediate_size") else
                                "expert_intermediate_size", f),
                        norm_topk=flag(c, "norm_topk_prob", False))
    elif layout == "llada2_moe":
        score = str(_first(c, ("score_function", "moe_router_score_function", "scoring_func"), "sigmoid")).lower()
        if score != "sigmoid":
            raise ModelLoadError(f"LLaDA2.0 with a {score!r} router is not supported (sigmoid only)")
        expert_ffn = need(c, "moe_intermediate_size", f)
        # Read strictly like the sizes: `int("64")`, `int(1.5)` and `float(true)` had passed, a NaN
        # scaling factor loaded and wrote NaN logits, and a null partial_rotary_factor failed in
        # float() with a message that named no key.
        shared = optional(c, "num_shared_experts", 0, low=0)
        moe = MoEConfig(n_experts=need(c, "num_experts", f), top_k=need(c, "num_experts_per_tok", f),
                        ffn_dim=expert_ffn, router="sigmoid", n_group=optional(c, "n_group", 8),
                        topk_group=optional(c, "topk_group", 4),
                        routed_scaling=optional(c, "routed_scaling_factor", 2.5, float), expert_bias=True,
                        shared_ffn_dim=expert_ffn * shared)
        dense = tuple(range(min(optional(c, "first_k_dense_replace", 0, low=0, high=MAX_LAYERS), layers)))
    if (moe is None or dense) and not common["ffn_dim"]:
        if c.get("intermediate_size") is not None:   # 0: said "lacks" of a key that is there
            raise ModelLoadError(f"config.json 'intermediate_size' is 0: the {family.key} family's dense MLP "
                                 f"needs it within 1..{MAX_SIZE}")
        raise ModelLoadError(f"config.json lacks 'intermediate_size', which the {family.key} family needs")
    try:
        return BlockConfig(**common, **attn, moe=moe, dense_layers=dense)
    except ValueError as exc:
        raise ModelLoadError(f"config.json describes an impossible shape: {exc}") from exc


def _named_size(config: dict, generation: dict, keys: tuple[str, ...], default: int, high: int, what: str) -> int:
    """The first of `keys` set in config.json, else in generation_config.json, else `default`: a
    JSON integer within 1..high. A block of 1.5, `true` or "64" had been read by int() as 1, 1 and 64,
    and a 0 as the family's default."""
    for source, file in ((config, "config.json"), (generation, "generation_config.json")):
        key = next((k for k in keys if source.get(k) is not None), None)
        if key is None:
            continue
        size = source[key]
        if isinstance(size, bool) or not isinstance(size, int):
            raise ModelLoadError(f"{file} {key!r} must be an integer, not {size!r}")
        if not 1 <= size <= high:
            raise ModelLoadError(f"{what} {size} must be within 1..{high} ({file} {key!r})")
        return size
    return default


def block_size(family: BlockFamily, config: dict, generation: dict) -> int:
    # At most the model's positions: a billion-token block ran the first request out of memory.
    return _named_size(config, generation, ("block_size", "bd_size", "block_length"), family.block_size,
                       max_context(config), "block size")


def sub_block_size(family: BlockFamily, config: dict, generation: dict, block: int) -> int | None:
    """Fast-dLLM v2's sub-block (`small_block_size`, a generate() argument: 8 unless a config names one);
    None where a block is decoded whole (a sub-block as long as the block, or longer)."""
    if family.sub_block_size is None:
        return None
    size = _named_size(config, generation, ("small_block_size", "sub_block_size"), family.sub_block_size, MAX_SIZE,
                       "sub-block size")
    return size if size < block else None


def max_context(config: dict) -> int:
    return optional(config, "max_position_embeddings", 4096)


# -- tensor names --------------------------------------------------------------------------------
# A plan maps each of our parameters to the checkpoint tensors it is made of:
# (groups, stacked): every group's tensors are concatenated along dim 0; a stacked parameter (the
# experts of a MoE layer) stacks its groups along a new first dim.
Piece = tuple[str, tuple[int, ...]]
Plan = dict[str, tuple[list[list[Piece]], bool]]


def weight_plan(family: BlockFamily, cfg: BlockConfig) -> Plan:
    d, hd = cfg.dim, cfg.head_dim
    q_rows, kv_rows = cfg.n_heads * hd, cfg.n_kv_heads * hd
    llada2 = family.layout == "llada2_moe"
    plan: Plan = {}

    def one(ours: str, name: str, shape: tuple[int, ...]) -> None:
        plan[ours] = ([[(name, shape)]], False)

    one("embed.weight", "model.word_embeddings.weight" if llada2 else "model.embed_tokens.weight", (cfg.vocab_size, d))
    one("norm", "model.norm.weight", (d,))
    if not cfg.tied_embeddings:
        one("lm_head.weight", "lm_head.weight", (cfg.vocab_size, d))
    for i in range(cfg.n_layers):
        ours, src = f"layers.{i}.", f"model.layers.{i}."
        one(ours + "attn_norm", src + "input_layernorm.weight", (d,))
        one(ours + "mlp_norm", src + "post_attention_layernorm.weight", (d,))
        if llada2:
            att = src + "attention."
            one(ours + "attn.qkv_proj.weight", att + "query_key_value.weight", (q_rows + 2 * kv_rows, d))
            if cfg.qkv_bias:
                one(ours + "attn.qkv_proj.bias", att + "query_key_value.bias", (q_rows + 2 * kv_rows,))
            one(ours + "attn.o_proj.weight", att + "dense.weight", (d, q_rows))
            if cfg.out_bias:
                one(ours + "attn.o_proj.bias", att + "dense.bias", (d,))
            if cfg.qk_norm:
                one(ours + "attn.q_norm", att + "query_layernorm.weight", (hd,))
                one(ours + "attn.k_norm", att + "key_layernorm.weight", (hd,))
        else:
            att = src + "self_attn."
            plan[ours + "attn.qkv_proj.weight"] = ([[(att + "q_proj.weight", (q_rows, d)),
                                                     (att + "k_proj.weight", (kv_rows, d)),
                                                     (att + "v_proj.weight", (kv_rows, d))]], False)
            if cfg.qkv_bias:
                plan[ours + "attn.qkv_proj.bias"] = ([[(att + "q_proj.bias", (q_rows,)), (att + "k_proj.bias", (kv_rows,)),
                                                       (att + "v_proj.bias", (kv_rows,))]], False)
            one(ours + "attn.o_proj.weight", att + "o_proj.weight", (d, q_rows))
            if cfg.out_bias:
                one(ours + "attn.o_proj.bias", att + "o_proj.bias", (d,))
            if cfg.qk_norm:
                one(ours + "attn.q_norm", att + "q_norm.weight", (hd,))
                one(ours + "attn.k_norm", att + "k_norm.weight", (hd,))
        mlp = src + "mlp."
        if not cfg.is_moe_layer(i):
            _dense(plan, ours + "mlp.", mlp, d, cfg.ffn_dim)
            continue
        moe = cfg.moe
        one(ours + "mlp.router", mlp + "gate.weight", (moe.n_experts, d))
        if moe.expert_bias:
            one(ours + "mlp.expert_bias", mlp + "gate.expert_bias", (moe.n_experts,))
        f = moe.ffn_dim
        plan[ours + "mlp.gate_up"] = ([[(f"{mlp}experts.{e}.gate_proj.weight", (f, d)),
                                        (f"{mlp}experts.{e}.up_proj.weight", (f, d))] for e in range(moe.n_experts)], True)
        plan[ours + "mlp.down"] = ([[(f"{mlp}experts.{e}.down_proj.weight", (d, f))] for e in range(moe.n_experts)], True)
        if moe.shared_ffn_dim:
            _dense(plan, ours + "mlp.shared.", mlp + "shared_experts.", d, moe.shared_ffn_dim)
    return plan


def _dense(plan: Plan, ours: str, src: str, d: int, f: int) -> None:
    plan[ours + "gate_up_proj.weight"] = ([[(src + "gate_proj.weight", (f, d)), (src + "up_proj.weight", (f, d))]], False)
    plan[ours + "down_proj.weight"] = ([[(src + "down_proj.weight", (d, f))]], False)

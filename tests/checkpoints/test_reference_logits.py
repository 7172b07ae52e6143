"""(b) Our native stacks against transformers' own Qwen2 / Llama modules on the same weights.

The reference runs with a full, non-causal 4D attention mask (all zeros: every token sees
every token), which is what these diffusion models do. LLaDA's tensors are renamed to Llama's
from LLaDA's modeling code: ff_proj is the SiLU-gated branch, up_proj the linear one, ff_out
the down projection, attn_out the output projection. Dream-family tensors already carry
Qwen2's names, so the reference loads them unchanged.
"""
import json

import pytest
import torch
from safetensors.torch import load_file

from dllm_lsp.checkpoints.architecture import BidirectionalLM

TOL = 1e-4


def read_all_tensors(folder):
    tensors = {}
    for shard in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(str(shard)))
    return tensors


def llada_to_llama(tensors: dict, n_layers: int) -> dict:
    out = {"model.embed_tokens.weight": tensors["model.transformer.wte.weight"],
           "model.norm.weight": tensors["model.transformer.ln_f.weight"],
           "lm_head.weight": tensors["model.transformer.ff_out.weight"]}
    parts = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
             "attn_out": "self_attn.o_proj", "ff_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
             "ff_out": "mlp.down_proj", "attn_norm": "input_layernorm", "ff_norm": "post_attention_layernorm"}
    for i in range(n_layers):
        for theirs, llama in parts.items():
            out[f"model.layers.{i}.{llama}.weight"] = tensors[f"model.transformer.blocks.{i}.{theirs}.weight"]
    return out


def reference_model(layout: str, folder):
    import transformers

    config = json.loads((folder / "config.json").read_text())
    tensors = read_all_tensors(folder)
    if layout == "llada":
        cfg = transformers.LlamaConfig(
            hidden_size=config["d_model"], intermediate_size=config["mlp_hidden_size"],
            num_attention_heads=config["n_heads"], num_key_value_heads=config["n_kv_heads"],
            num_hidden_layers=config["n_layers"], vocab_size=config["embedding_size"],
            rms_norm_eps=config["rms_norm_eps"], rope_theta=config["rope_theta"], tie_word_embeddings=False,
            attention_bias=False, mlp_bias=False, max_position_embeddings=config["max_sequence_length"],
        )
        model = transformers.LlamaForCausalLM(cfg)
        state = llada_to_llama(tensors, config["n_layers"])
    else:
        keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                "num_hidden_layers", "vocab_size", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
                "max_position_embeddings")
        cfg = transformers.Qwen2Config(**{k: config[k] for k in keys})
        model = transformers.Qwen2ForCausalLM(cfg)
        state = tensors
    cfg._attn_implementation = "eager"
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected
    assert all(k == "lm_head.weight" for k in missing) and (not missing or cfg.tie_word_embeddings)
    return model.eval()


def reference_logits(model, ids: torch.Tensor) -> torch.Tensor:
    b, t = ids.shape
    full = torch.zeros(b, 1, t, t)          # additive mask of zeros: nothing is masked, no causality
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=full).logits


@pytest.mark.parametrize("layout", ["llada", "dream", "diffucoder", "dreamon", "open-dcoder"])
def test_logits_match_transformers(layout, tiny_checkpoints, loaded):
    denoiser = loaded[layout]
    model: BidirectionalLM = denoiser.model
    reference = reference_model(layout, tiny_checkpoints[layout])
    torch.manual_seed(1)
    ids = torch.randint(0, denoiser.vocab_limit, (2, 37))
    ours_hidden, _ = model.full(ids)
    ours = model.head(ours_hidden)
    theirs = reference_logits(reference, ids)
    assert ours.shape == theirs.shape
    assert (ours - theirs).abs().max().item() < TOL


@pytest.mark.parametrize("layout", ["llada", "dream"])
def test_causal_reference_differs(layout, tiny_checkpoints, loaded):
    """The comparison can fail: with the reference's default causal mask the logits disagree."""
    model = loaded[layout].model
    reference = reference_model(layout, tiny_checkpoints[layout])
    ids = torch.randint(0, loaded[layout].vocab_limit, (1, 20))
    with torch.no_grad():
        causal = reference(input_ids=ids).logits
    ours = model.head(model.full(ids)[0])
    assert (ours - causal).abs().max().item() > 1e-2


def test_session_rows_follow_each_family_shift(tiny_checkpoints, loaded):
    """Dream-family row s comes from position s-1 (the reference's shift); LLaDA's from position s."""
    from dllm_lsp.engine.denoiser import Canvas
    from dllm_lsp.engine.types import CacheSettings

    for layout, shift in (("llada", 0), ("dream", 1), ("open-dcoder", 1)):
        denoiser = loaded[layout]
        reference = reference_model(layout, tiny_checkpoints[layout])
        ids = torch.randint(0, denoiser.vocab_limit, (12,))
        ids[5:9] = denoiser.special.mask_id
        canvas = Canvas(ids, [(5, 9)])
        got = denoiser.session(canvas, 1, CacheSettings("none")).logits(ids[None])
        full = reference_logits(reference, ids[None])[..., : denoiser.vocab_limit]
        want = full[:, 5 - shift: 9 - shift]      # the mask's score too: the engine, not the port, keeps it out
        assert torch.allclose(got, want, atol=TOL)

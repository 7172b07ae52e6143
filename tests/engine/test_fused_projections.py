"""A loaded embedded model serves with q/k/v and gate/up fused into single matmuls
(`EmbeddedModel.fuse_projections`, the open checkpoints' layout too): the same function, three
launches fewer per layer and step. Held here to the separate projections it was trained with."""
from __future__ import annotations

import torch

from dllm_lsp.arch.embedded import EmbeddedConfig, EmbeddedModel
from dllm_lsp.arch.layers import FusedSwiGLU
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model


def test_a_loaded_model_is_fused_and_computes_what_the_separate_projections_do(tiny_model_dir):
    denoiser = load_model(tiny_model_dir, "cpu")
    fused = denoiser.model
    assert all(layer.attn.qkv_proj is not None and isinstance(layer.mlp, FusedSwiGLU) for layer in fused.layers)
    assert not hasattr(fused.layers[0].attn, "q_proj")           # the separate weights are not kept twice
    separate = EmbeddedModel(fused.cfg).eval()
    separate.load_state_dict(_unfused_state(fused))
    torch.manual_seed(0)
    ids = torch.randint(3, fused.cfg.vocab_size, (2, 40))
    is_span = torch.zeros_like(ids, dtype=torch.bool)
    is_span[:, 20:28] = True
    with torch.no_grad():
        torch.testing.assert_close(fused(ids, is_span), separate(ids, is_span), atol=1e-5, rtol=1e-5)
    # And the engine's completions with the fused model are those of the separate projections.
    engine = Engine(denoiser, batching=False)
    request = InfillRequest.single("def area(width, height):\n    total = width * height\n    return ", "\n", 16)
    want = engine.infill(request, DecodeSettings(steps=6)).text
    denoiser.model = separate
    assert engine.infill(request, DecodeSettings(steps=6)).text == want


def _unfused_state(model: EmbeddedModel) -> dict[str, torch.Tensor]:
    """The fused model's weights under the names of the separate projections."""
    cfg, state = model.cfg, {}
    hq, hkv = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    for name, tensor in model.state_dict().items():
        if name.endswith("attn.qkv_proj.weight"):
            prefix = name.removesuffix("qkv_proj.weight")
            for part, value in zip(("q_proj", "k_proj", "v_proj"), tensor.split((hq, hkv, hkv))):
                state[f"{prefix}{part}.weight"] = value
        elif name.endswith("mlp.gate_up_proj.weight"):
            prefix = name.removesuffix("gate_up_proj.weight")
            gate, up = tensor.chunk(2)
            state[f"{prefix}gate_proj.weight"], state[f"{prefix}up_proj.weight"] = gate, up
        else:
            state[name] = tensor
    return state


def test_fusing_twice_changes_nothing_and_training_models_stay_separate():
    model = EmbeddedModel(EmbeddedConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48))
    assert model.layers[0].attn.qkv_proj is None and hasattr(model.layers[0].attn, "q_proj")
    once = {k: v.clone() for k, v in model.fuse_projections().state_dict().items()}
    again = model.fuse_projections().state_dict()
    assert once.keys() == again.keys() and all(torch.equal(once[k], again[k]) for k in once)

"""A config whose attention heads rotary embeddings cannot run on is refused at load, naming the key.

An odd head width (rotary embeddings rotate pairs of channels), a width that does not divide into
the heads, or a head_dim the weights were not trained with: the first two loaded -- every tensor
agreed with the config -- and the warm-up's first forward pass then failed with a shape error
("cannot run", after the whole model had been copied to the device); the third was a bare shape
mismatch of one tensor. Real loader, real tiny folders whose weights agree with the edited config.
"""
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.checkpoints.architecture import BiConfig, BidirectionalLM
from dllm_lsp.checkpoints.block_tiny import write_tiny_block_checkpoint
from dllm_lsp.checkpoints.families import LLADA, tensor_names
from dllm_lsp.checkpoints.tiny import FAMILY_OF, write_safetensors, write_tiny_checkpoint
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import ModelLoadError, load_model

ROTARY = "rotary position embeddings need an even"


def reshape_checkpoint(folder: Path, layout: str, changes: dict, *, dim: int = 64, heads: int = 4, kv_heads: int = 2,
                       head_dim: int) -> Path:
    """A tiny `layout` folder with `changes` in its config.json and weights shaped for heads
    `head_dim` wide in a `dim`-wide model: every tensor agrees with what the loader builds from
    the edited config, so nothing but a check of the heads themselves can refuse it."""
    write_tiny_checkpoint(folder, layout, shards=1)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    family = FAMILY_OF[layout]
    cfg = BiConfig(vocab_size=config.get("embedding_size") or config["vocab_size"], dim=dim, n_layers=2, n_heads=heads,
                   n_kv_heads=kv_heads, head_dim=head_dim, ffn_dim=128, rope_theta=10000.0, norm_eps=1e-6,
                   qkv_bias=family is not LLADA, tied_embeddings=layout == "open-dcoder")
    torch.manual_seed(0)
    model = BidirectionalLM(cfg)
    for p in model.parameters():
        nn.init.normal_(p, 0.0, 0.08)
    names = tensor_names(family, cfg)
    write_safetensors(folder, {names[k]: v.contiguous() for k, v in model.state_dict().items() if k in names}, 1)
    return folder


def refusal(folder: Path) -> str:
    with pytest.raises(ModelLoadError) as info:
        load_model(str(folder), "cpu")
    message = str(info.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize("layout, changes, dim, head_dim, fragments", [
    # Qwen2 families: head_dim given, odd (the warm-up test's old reproducer of "cannot run")
    ("open-dcoder", {"head_dim": 15}, 64, 15, ["config.json 'head_dim' is 15", ROTARY]),
    # derived from hidden_size / num_attention_heads, odd
    ("dream", {"hidden_size": 60}, 60, 15, ["'hidden_size' 60 / 'num_attention_heads' 4 makes heads 15 wide", ROTARY]),
    # LLaDA names no head_dim: d_model / n_heads, odd
    ("llada", {"d_model": 60}, 60, 15, ["'d_model' 60 / 'n_heads' 4 makes heads 15 wide", ROTARY]),
])
def test_an_odd_head_is_refused_at_load_naming_the_key(tmp_path, layout, changes, dim, head_dim, fragments):
    folder = reshape_checkpoint(tmp_path / layout, layout, changes, dim=dim, head_dim=head_dim)
    message = refusal(folder)
    for fragment in fragments:
        assert fragment in message, message


def test_a_width_that_does_not_divide_into_the_heads_is_refused(tmp_path):
    # 66 / 4: the remainder was dropped (heads 16 wide), and weights shaped that way loaded.
    folder = reshape_checkpoint(tmp_path / "qwen", "open-dcoder", {"hidden_size": 66}, dim=66, head_dim=16)
    message = refusal(folder)
    assert "'hidden_size' 66 does not divide into 'num_attention_heads' 4" in message, message
    assert "no 'head_dim'" in message, message


def test_a_head_dim_the_weights_disagree_with_is_told_as_such(tmp_path):
    folder = reshape_checkpoint(tmp_path / "qwen", "open-dcoder", {"head_dim": 8}, head_dim=16)
    message = refusal(folder)
    assert "config.json gives a head_dim of 8" in message and "are 16 wide" in message, message
    assert "model.layers.0.self_attn.q_proj.weight has 64 rows for 4 heads" in message, message


def test_a_given_head_dim_other_than_width_over_heads_still_loads_and_runs(tmp_path):
    # Qwen3-style: heads 32 wide in a 64-wide model of 4 heads (Qwen3-4B: 128 in 2,560 of 32).
    folder = reshape_checkpoint(tmp_path / "wide-heads", "open-dcoder", {"head_dim": 32}, head_dim=32)
    denoiser = load_model(str(folder), "cpu")
    assert denoiser.model.cfg.head_dim == 32
    result = Engine(denoiser, batching=False).infill(InfillRequest.single("def f(x):\n    return ", "\n", 4),
                                                     DecodeSettings(steps=2))
    assert result.candidates and result.steps >= 1


@pytest.mark.parametrize("layout, changes, fragments", [
    ("sdar", {"head_dim": 15}, ["config.json 'head_dim' is 15", ROTARY]),
    ("fast-dllm-v2", {"head_dim": None, "hidden_size": 66},
     ["'hidden_size' 66 does not divide into 'num_attention_heads' 4"]),
    # LLaDA2 rotates int(16 * 0.3125) = 5 channels of each head
    ("llada2", {"partial_rotary_factor": 0.3125}, ["'partial_rotary_factor' 0.3125 rotates 5 of a head's 16", "even"]),
])
def test_block_families_name_the_key_too(tmp_path, layout, changes, fragments):
    # These were refused already, as "an impossible shape: rotary dimension 15 does not fit a head
    # of 15", or loaded with the remainder dropped (66 / 4).
    folder = write_tiny_block_checkpoint(tmp_path / layout, layout, shards=1)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    config = {k: v for k, v in config.items() if v is not None}
    (folder / "config.json").write_text(json.dumps(config))
    message = refusal(folder)
    for fragment in fragments:
        assert fragment in message, message


def test_the_embedded_model_refuses_an_odd_head_too(tmp_path):
    folder = write_tiny_model(tmp_path / "embedded", dim=60, n_heads=4, n_kv_heads=2)
    message = refusal(folder)
    assert "'dim' 60 / 'n_heads' 4 makes heads 15 wide" in message and ROTARY in message, message

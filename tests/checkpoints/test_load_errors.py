"""(a) every family loads and is recognised; (d) a corrupt or incomplete folder gives a clear error."""
import json

import pytest
from safetensors.torch import load_file, save_file

from dllm_lsp.checkpoints import SUPPORTED_FAMILIES
from dllm_lsp.checkpoints.tiny import EXECUTED_MARKER
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import ModelLoadError, load_model

FAMILY = {"llada": "llada", "dream": "dream", "diffucoder": "dream", "dreamon": "dreamon", "open-dcoder": "open-dcoder"}


@pytest.mark.parametrize("layout", sorted(FAMILY))
def test_each_family_loads_without_running_folder_code(layout, tiny_checkpoints, loaded):
    denoiser = loaded[layout]
    assert denoiser.family == FAMILY[layout]
    assert not (tiny_checkpoints[layout] / EXECUTED_MARKER).exists()
    config = json.loads((tiny_checkpoints[layout] / "config.json").read_text())
    if "mask_token_id" in config:
        assert denoiser.special.mask_id == config["mask_token_id"]
    assert denoiser.tokenizer.id_to_token(denoiser.special.mask_id) in ("<|mask|>", "<|mdm_mask|>")
    assert denoiser.decode(denoiser.encode("def f(x):\n    return x\n")) == "def f(x):\n    return x\n"


def test_special_tokens_come_from_the_folder(loaded):
    diffucoder, dream = loaded["diffucoder"].special, loaded["dream"].special
    assert loaded["diffucoder"].tokenizer.id_to_token(diffucoder.pad_id) == "<|dlm_pad|>"
    assert loaded["dream"].tokenizer.id_to_token(dream.pad_id) == "<|endoftext|>"
    llada = loaded["llada"]
    assert llada.tokenizer.id_to_token(llada.special.bos_id) == "<|startoftext|>"
    assert loaded["dreamon"].tokenizer.id_to_token(loaded["dreamon"].special.expand_id) == "<|expand|>"


def edit_json(path, **changes):
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data))


def expect_error(folder, *fragments):
    with pytest.raises(ModelLoadError) as info:
        load_model(str(folder), "cpu")
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_unknown_family_lists_the_supported_ones(fresh_copy):
    folder = fresh_copy("dream")
    edit_json(folder / "config.json", model_type="mamba", architectures=["MambaForCausalLM"])
    message = expect_error(folder, "unsupported model family", "mamba")
    for title in ("LLaDA", "Dream", "DreamOn", "Open-dCoder", "SDAR", "Fast-dLLM v2", "LLaDA2.0", "CoDA"):
        assert title in message
    assert len(SUPPORTED_FAMILIES) == 11     # 4 masked-diffusion families + 7 block-diffusion / newer coders


def test_qwen2_without_mask_is_called_autoregressive(fresh_copy):
    folder = fresh_copy("open-dcoder")
    edit_json(folder / "tokenizer_config.json", mask_token=None)
    edit_json(folder / "special_tokens_map.json", mask_token=None)
    expect_error(folder, "autoregressive")


def test_missing_shard(fresh_copy):
    folder = fresh_copy("llada")
    (folder / "model-00002-of-00002.safetensors").unlink()
    expect_error(folder, "incomplete", "model-00002-of-00002.safetensors", "missing")


def test_truncated_shard(fresh_copy):
    folder = fresh_copy("dream")
    shard = folder / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    expect_error(folder, "model-00001-of-00002.safetensors")


def test_garbage_shard(fresh_copy):
    folder = fresh_copy("dream")
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"not a safetensors file at all")
    expect_error(folder, "model-00002-of-00002.safetensors")


def test_missing_tensor(fresh_copy):
    folder = fresh_copy("dream")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    del index["weight_map"]["model.layers.1.mlp.up_proj.weight"]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    expect_error(folder, "lack tensor model.layers.1.mlp.up_proj.weight")


def test_index_points_at_wrong_shard(fresh_copy):
    folder = fresh_copy("llada")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    name = next(iter(index["weight_map"]))
    index["weight_map"][name] = "model-00002-of-00002.safetensors" if index["weight_map"][name].startswith(
        "model-00001") else "model-00001-of-00002.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    expect_error(folder, "lacks", name)


def test_shape_disagrees_with_config(fresh_copy):
    folder = fresh_copy("dream")
    edit_json(folder / "config.json", intermediate_size=96)
    expect_error(folder, "has shape", "config.json implies")


def test_config_missing_a_key(fresh_copy):
    folder = fresh_copy("llada")
    edit_json(folder / "config.json", d_model=None)
    expect_error(folder, "config.json lacks 'd_model'")


def test_bad_index_json(fresh_copy):
    folder = fresh_copy("dream")
    (folder / "model.safetensors.index.json").write_text("{ nope")
    expect_error(folder, "model.safetensors.index.json is not valid JSON")


def test_pickle_only_folder_is_refused(fresh_copy):
    folder = fresh_copy("dream")
    for shard in folder.glob("*.safetensors"):
        shard.unlink()
    (folder / "model.safetensors.index.json").unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
    expect_error(folder, "pickle", "refused")


def test_no_tokenizer(fresh_copy):
    folder = fresh_copy("open-dcoder")
    (folder / "tokenizer.json").unlink()
    expect_error(folder, "no tokenizer")


def test_mask_id_disagreement(fresh_copy):
    folder = fresh_copy("dream")
    edit_json(folder / "config.json", mask_token_id=7)
    edit_json(folder / "generation_config.json", mask_token_id=7)
    expect_error(folder, "mask_token_id 7", "disagree")


def test_mask_id_outside_the_embedding(fresh_copy):
    folder = fresh_copy("llada")
    edit_json(folder / "config.json", mask_token_id=126336)
    expect_error(folder, "126336", "outside")


def test_unsupported_variant(fresh_copy):
    folder = fresh_copy("dream")
    edit_json(folder / "config.json", rope_scaling={"type": "yarn", "factor": 4})
    expect_error(folder, "rope_scaling")


def test_corrupt_tokenizer_file(fresh_copy):
    folder = fresh_copy("llada")
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": 42}')
    expect_error(folder, "tokenizer.json", "not a valid tokenizer file")


@pytest.mark.parametrize("layout, names", [
    ("llada", ["model.transformer.wte.weight", "model.transformer.ln_f.weight", "model.transformer.ff_out.weight",
               "model.transformer.blocks.1.q_proj.weight", "model.transformer.blocks.1.attn_out.weight",
               "model.transformer.blocks.1.ff_proj.weight", "model.transformer.blocks.1.up_proj.weight",
               "model.transformer.blocks.1.ff_out.weight", "model.transformer.blocks.1.attn_norm.weight",
               "model.transformer.blocks.1.ff_norm.weight"]),
    ("dream", ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
               "model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.q_proj.bias",
               "model.layers.1.self_attn.o_proj.weight", "model.layers.1.mlp.gate_proj.weight",
               "model.layers.1.input_layernorm.weight", "model.layers.1.post_attention_layernorm.weight"]),
])
def test_tiny_folders_use_the_families_real_tensor_names(layout, names, tiny_checkpoints):
    index = json.loads((tiny_checkpoints[layout] / "model.safetensors.index.json").read_text())["weight_map"]
    for name in names:
        assert name in index
    if layout == "llada":
        assert not any(".bias" in n for n in index)           # include_bias false, as in LLaDA-8B
    else:
        assert "model.layers.1.self_attn.o_proj.bias" not in index   # Qwen2: q/k/v biases only


@pytest.mark.parametrize("layout, changes, fragments", [
    ("dream", {"num_hidden_layers": 0}, ["'num_hidden_layers' is 0", "1..1024"]),      # loaded, then IndexError
    ("dream", {"num_hidden_layers": -3}, ["'num_hidden_layers' is -3"]),
    ("dream", {"num_hidden_layers": True}, ["'num_hidden_layers' must be an integer, not True"]),   # was 1
    ("dream", {"hidden_size": 64.5}, ["'hidden_size' must be an integer, not 64.5"]),              # was 64
    ("dream", {"num_hidden_layers": 100_000}, ["'num_hidden_layers' is 100000"]),   # built 100k layers first
    ("dream", {"head_dim": 10**9}, ["'head_dim' is 1000000000"]),                   # 10 GB of RoPE tables
    ("dream", {"tie_word_embeddings": "false"}, ["'tie_word_embeddings' must be true or false"]),   # read as true
    ("dream", {"rope_theta": -1}, ["'rope_theta' must be a positive number"]),
    ("dream", {"max_position_embeddings": -5}, ["'max_position_embeddings' is -5"]),  # loaded, failed each request
    ("llada", {"n_layers": 0}, ["'n_layers' is 0"]),
    ("llada", {"mlp_ratio": 0, "mlp_hidden_size": None}, ["'mlp_ratio' is 0"]),
])
def test_a_config_value_of_the_wrong_kind_or_size_is_refused_before_anything_is_built(fresh_copy, layout, changes,
                                                                                        fragments):
    folder = fresh_copy(layout)
    edit_json(folder / "config.json", **changes)
    message = expect_error(folder, *fragments)
    assert "\n" not in message


def test_weights_with_more_layers_than_the_config_are_refused(fresh_copy):
    """The layers past config.json's count were left out without a word: a truncated model."""
    folder = fresh_copy("dream")
    edit_json(folder / "config.json", num_hidden_layers=1)
    expect_error(folder, "hold 2 layers", "config.json says 1")


def test_a_mask_past_the_tokenizer_but_inside_the_embedding_completes(fresh_copy):
    """A LLaDA mask id the embedding has a row for but the tokenizer does not (or a Dream folder
    without its tokenizer_config.json): every request failed with IndexError."""
    folder = fresh_copy("llada")
    loaded = load_model(str(folder), "cpu")
    vocab = loaded.tokenizer.get_vocab_size(with_added_tokens=True)
    assert vocab < loaded.model.cfg.vocab_size
    edit_json(folder / "config.json", mask_token_id=vocab + 1)
    denoiser = load_model(str(folder), "cpu")
    assert denoiser.special.mask_id == vocab + 1
    result = Engine(denoiser, batching=False).infill(InfillRequest.single("def f(x):\n    return ", "\n", 8),
                                                     DecodeSettings(steps=4))
    assert result.candidates and result.steps >= 1


def test_a_model_path_too_long_for_the_file_system_is_one_line(tmp_path):
    """Path.exists raised ENAMETOOLONG: a traceback in the CLI, and a server that stayed
    'not loaded yet' for good."""
    with pytest.raises(ModelLoadError, match="cannot be read: File name too long"):
        load_model(str(tmp_path / ("x" * 300)), "cpu")


def test_a_folder_whose_name_is_not_utf8_is_refused_in_one_line(tiny_checkpoints, tmp_path):
    """safetensors and tokenizers open files by UTF-8 paths only: the load failed deep inside them,
    in three lines about surrogates."""
    import os
    import shutil

    target = os.path.join(os.fsencode(tmp_path), b"llada-\xff\xfe")
    shutil.copytree(os.fsencode(tiny_checkpoints["llada"]), target)
    with pytest.raises(ModelLoadError, match="not UTF-8: rename it") as info:
        load_model(os.fsdecode(target), "cpu")
    assert "\n" not in str(info.value)


def test_a_weight_holding_nan_is_refused(fresh_copy):
    folder = fresh_copy("dream")
    shard = folder / "model-00002-of-00002.safetensors"
    state = load_file(str(shard))
    name = next(n for n, t in state.items() if t.is_floating_point())
    state[name].view(-1)[0] = float("nan")
    save_file(state, str(shard), metadata={"format": "pt"})
    expect_error(folder, "NaN or infinite values", "diverged")

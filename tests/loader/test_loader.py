"""Model folders that are missing, incomplete or corrupt give errors that name the problem."""
from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from dllm_lsp.loader import ModelLoadError, load_model, resolve_device


@pytest.fixture
def model_copy(tmp_path, tiny_model_dir):
    return shutil.copytree(tiny_model_dir, tmp_path / "copy")


def test_loads_the_tiny_model(model_copy):
    denoiser = load_model(model_copy, "cpu")
    assert denoiser.family == "embedded" and denoiser.name == "copy"


def test_missing_config(model_copy):
    (model_copy / "config.json").unlink()
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(model_copy, "cpu")


def test_config_that_is_not_json(model_copy):
    (model_copy / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        load_model(model_copy, "cpu")


def test_config_nested_past_the_recursion_limit(model_copy):
    (model_copy / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelLoadError, match="nested too deeply"):
        load_model(model_copy, "cpu")


@pytest.mark.parametrize("key, value, message", [
    ("mask_token_id", 99_999, "mask_token_id must be a token id below vocab_size"),
    ("mask_token_id", -5, "mask_token_id must be a token id"),
    ("pad_token_id", 0, "a pad would read as a mask"),
    ("eos_token_id", True, "eos_token_id must be a token id"),
    ("norm_eps", "x", "norm_eps must be a positive number"),
    ("rope_theta", -1, "rope_theta must be a positive number"),
    ("max_positions", 8, "max_positions 8 leaves no room"),
    ("max_positions", 0, "max_positions must be a positive integer"),
    ("dim", "192", "dim must be a positive integer"),
])
def test_config_values_the_model_cannot_run_with(model_copy, key, value, message):
    """Once loaded, and the first completion failed with a traceback (an index out of range, a
    canvas with no room): each is a load error naming the value now."""
    config = json.loads((model_copy / "config.json").read_text())
    (model_copy / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(ModelLoadError, match=message):
        load_model(model_copy, "cpu")


def test_missing_weights(model_copy):
    (model_copy / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="no model.safetensors"):
        load_model(model_copy, "cpu")


def test_truncated_weights(model_copy):
    weights = model_copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ModelLoadError, match="could not load"):
        load_model(model_copy, "cpu")


def test_weights_of_the_wrong_shape(model_copy):
    config = json.loads((model_copy / "config.json").read_text())
    config["dim"] = 128
    (model_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="could not load"):
        load_model(model_copy, "cpu")


def test_pickle_weights_are_never_read(model_copy):
    (model_copy / "model.safetensors").rename(model_copy / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="no model.safetensors"):
        load_model(model_copy, "cpu")


def test_unknown_family_lists_supported_ones(model_copy):
    config = json.loads((model_copy / "config.json").read_text())
    config["model_type"] = "mystery"
    config["architectures"] = ["MysteryForCausalLM"]
    (model_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="supported"):
        load_model(model_copy, "cpu")


def test_path_that_is_a_file(tmp_path):
    target = tmp_path / "file.txt"
    target.write_text("x")
    with pytest.raises(ModelLoadError, match="not a folder"):
        load_model(target, "cpu")


def test_cuda_without_a_gpu_is_explained():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ModelLoadError, match="no CUDA"):
        resolve_device("cuda")
    with pytest.raises(ModelLoadError, match="unknown device"):
        resolve_device("tpu9")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_weights_holding_nan_or_infinity_are_refused(model_copy, bad):
    # Such a model loads and writes the same meaningless token for every completion, silently.
    state = load_file(str(model_copy / "model.safetensors"))
    name = next(n for n, t in state.items() if t.is_floating_point() and t.dim() == 2)
    state[name].view(-1)[3] = bad
    save_file(state, str(model_copy / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=f"NaN or infinite values \\({name}\\)"):
        load_model(model_copy, "cpu")


def test_a_shipped_models_name_is_that_model_whatever_the_current_folder_holds(tmp_path, monkeypatch):
    """An editor starts the server in the workspace: a folder there named like a shipped model had
    replaced it (or broken the load). `./name` still means the folder."""
    from dllm_lsp.loader import resolve_model_path, shipped_model_names, shipped_models_dir

    name = shipped_model_names()[0]
    (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path(name) == shipped_models_dir() / name
    assert resolve_model_path(f"./{name}").resolve() == (tmp_path / name).resolve()

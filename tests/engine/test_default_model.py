"""models/DEFAULT names the shipped default per device type: a GPU-trained model can be the
default on GPUs while a small model stays the CPU's (dllm_lsp/loader.py)."""
from dllm_lsp.loader import default_model_path, default_name, load_model, shipped_models_dir, with_default


def test_a_bare_name_is_every_devices_default():
    assert default_name("preview\n", "cpu") == default_name("preview\n", "cuda") == "preview"
    assert default_name("  # a comment\n\npreview  # the CPU one\n", None) == "preview"


def test_a_device_line_wins_over_the_bare_name():
    marker = "preview\ncuda: big\n"
    assert default_name(marker, "cuda") == "big"
    assert default_name(marker, "cpu") == "preview" and default_name(marker, None) == "preview"


def test_without_a_bare_name_other_devices_get_the_cpus_model():
    marker = "cuda: big\ncpu: small\n"
    assert default_name(marker, "mps") == "small"
    assert default_name("cuda: big\n", "cpu") == "big"      # the only model there is
    assert default_name("", "cpu") is None


def test_with_default_replaces_only_that_devices_line():
    marker = with_default("preview\n", "cuda", "big")
    assert marker == "preview\ncuda: big\n"
    again = with_default(marker, "cuda", "bigger")
    assert default_name(again, "cuda") == "bigger" and default_name(again, "cpu") == "preview"
    assert again.count("cuda:") == 1


def test_the_shipped_default_loads_on_the_cpu():
    marker = (shipped_models_dir() / "DEFAULT").read_text()
    expected = shipped_models_dir() / default_name(marker, "cpu")
    assert default_model_path("cpu") == expected
    assert load_model(None, "cpu").describe()["name"] == expected.name

"""Packaging (issue 14): the checkout runs as `python -m dllm_lsp` even when a copy was installed
with `pip install .`, triton is optional for CPU users, and the benchmark data is found (or the
error says where it comes from)."""
from __future__ import annotations

import gzip
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from dllm_lsp.eval.tasks import DATA_ENV, FILES, resolve_data

ROOT = Path(__file__).resolve().parents[2]


def test_checkout_root_imports_kernels_and_models_without_an_editable_install(tmp_path):
    """What `python -m dllm_lsp` in the checkout root sees after a non-editable install: the checkout's
    dllm_lsp/ first on sys.path, and no editable finder (-S: no .pth files are run)."""
    site = sysconfig.get_paths()["purelib"]
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]\n"
        "import dllm_lsp, dllm_lsp.kernels.dispatch as d\n"
        "from dllm_lsp.loader import shipped_models_dir\n"
        "print(d.__file__); print(shipped_models_dir())\n"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT), site], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    kernel_file, models = out.stdout.split()
    assert Path(kernel_file) == ROOT / "kernels" / "dispatch.py"
    assert Path(models) == ROOT / "models"


def test_python_dash_m_runs_from_the_checkout_root():
    out = subprocess.run([sys.executable, "-m", "dllm_lsp", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "serve" in out.stdout, out.stderr


def test_triton_is_not_a_hard_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(dep.startswith("triton") for dep in project["dependencies"])
    assert any(dep.startswith("triton") for dep in project["optional-dependencies"]["cuda"])


def test_benchmark_data_folder_from_option_or_environment(tmp_path, monkeypatch):
    path = tmp_path / FILES["single-line"]
    with gzip.open(path, "wt") as fh:
        fh.write("")
    assert resolve_data("single-line", tmp_path) == path
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert resolve_data("single-line") == path
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "empty"))
    with pytest.raises(ValueError) as refused:
        resolve_data("single-line")
    assert "github.com/openai/human-eval-infilling" in str(refused.value) and "--data-dir" in str(refused.value)

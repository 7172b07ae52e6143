"""Shared fixtures. TRITON_INTERPRET must be set before any kernel is decorated, so it is set here,
in the first file pytest imports, so the Triton kernels run on the CPU against their references."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny randomly initialised embedded model folder (causal-context layout)."""
    from dllm_lsp.arch.tiny import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models on a shared 2-core machine run fastest on one thread (more mostly wait on each other)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def sample_sources(tmp_path_factory) -> Path:
    """A folder of real Python files (a fixed snapshot of this package's modules, arch/tiny.py) to build corpora from."""
    from dllm_lsp.arch.tiny import sample_corpus

    folder = tmp_path_factory.mktemp("sources")
    for i, text in enumerate(sample_corpus()):
        (folder / f"m{i}.py").write_text(text)
    return folder

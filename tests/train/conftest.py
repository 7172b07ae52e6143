from pathlib import Path

import pytest

from dllm_lsp.arch.tiny import sample_corpus
from dllm_lsp.arch.tokenizer import special_ids, train_tokenizer


@pytest.fixture(scope="session")
def small_tokenizer_path(tmp_path_factory) -> Path:
    """A 512-token BPE trained on this package's own source (fast, always present)."""
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok = train_tokenizer(sample_corpus(), 512)
    special_ids(tok)
    tok.save(str(path))
    return path


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models on a shared 2-core machine run fastest on one thread (more mostly wait on each other)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

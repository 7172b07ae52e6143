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


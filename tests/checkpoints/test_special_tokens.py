"""One special-token resolver for every checkpoint family (families.special_tokens).

The masked-diffusion loader and the block-diffusion loader each had their own copy, and they had
drifted: only the block one looked the mask up by its usual spellings and the family's
hard-coded id, only the masked-diffusion one honoured a family's BOS and DreamOn's expand token.
Now each loader passes its fallbacks to the one function; these pin what each fallback does.
"""
from __future__ import annotations

import pytest

from dllm_lsp.checkpoints.block_loader import MASK_TEXTS
from dllm_lsp.checkpoints.families import EXPAND_TOKEN, special_tokens
from dllm_lsp.checkpoints.tiny import tiny_tokenizer
from dllm_lsp.checkpoints.tokenizer_files import TokenizerFiles
from dllm_lsp.model_folder import ModelLoadError


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer(["<|endoftext|>", "<|MASK|>", "<s>", EXPAND_TOKEN])


def test_the_config_names_the_tokens(tokenizer):
    files = TokenizerFiles(tokenizer)
    special = special_tokens({"mask_token_id": 5, "eos_token_id": 7, "pad_token_id": 8}, {}, files, 400)
    assert (special.mask_id, special.eos_id, special.pad_id, special.bos_id, special.expand_id) == (5, 7, 8, None, None)


def test_the_mask_by_its_spelling_or_the_familys_id_only_when_asked(tokenizer):
    files = TokenizerFiles(tokenizer)
    with pytest.raises(ModelLoadError, match="no mask token"):
        special_tokens({}, {}, files, 400)
    assert special_tokens({}, {}, files, 400, mask_texts=MASK_TEXTS).mask_id == tokenizer.token_to_id("<|MASK|>")
    assert special_tokens({}, {}, files, 400, default_mask=399).mask_id == 399
    with pytest.raises(ModelLoadError, match="none of"):
        special_tokens({}, {}, files, 400, mask_texts=("<nothing>",), default_mask=400)   # past the embedding


def test_bos_where_the_family_prepends_it_and_expand_where_it_grows_slots(tokenizer):
    files = TokenizerFiles(tokenizer, {"bos_token": "<s>", "eos_token": "<|endoftext|>"})
    config = {"mask_token_id": 5}
    assert special_tokens(config, {}, files, 400).bos_id is None
    assert special_tokens(config, {}, files, 400, prepend_bos=True).bos_id == tokenizer.token_to_id("<s>")
    grown = special_tokens(config, {}, files, 400, expand=True)
    assert grown.expand_id == tokenizer.token_to_id(EXPAND_TOKEN) and grown.eos_id == tokenizer.token_to_id("<|endoftext|>")
    with pytest.raises(ModelLoadError, match="EOS"):
        special_tokens(config, {}, TokenizerFiles(tokenizer), 400, expand=True)

"""Tiny randomly initialised embedded-model folders, for protocol and shape tests.

They produce meaningless completions; quality needs the trained model. By default the head
can only pick tokens that are bare identifier pieces, so whatever a tiny model writes is one
long identifier: valid in most completion spots, so post-processing keeps it and protocol and
editor tests see real text flow end to end.
"""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import torch
from safetensors.torch import save_file

from .embedded import EmbeddedConfig, EmbeddedModel
from .tokenizer import special_ids, train_tokenizer


IDENTIFIER_PIECE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
CORPUS_FILE = Path(__file__).with_name("tiny_corpus.json.gz")


def sample_corpus() -> list[str]:
    """Source text to train a tiny tokenizer on: a fixed snapshot of this package's modules
    (`tiny_corpus.json.gz`, taken from the tree of commit ed7146b). Fixed, because a tiny model's
    tokenizer decides every token id and so every random completion: trained on the live
    modules, it changed whenever any module was edited, and tests asserting how a random model
    decodes (its step counts, say) failed after unrelated edits. It also differed between an
    editable and a regular install (kernels/ sits inside the package only in the latter)."""
    return json.loads(gzip.decompress(CORPUS_FILE.read_bytes()))


def write_tiny_model(
    folder: Path, *, seed: int = 0, vocab_size: int = 512, dim: int = 64, n_layers: int = 2,
    n_heads: int = 4, n_kv_heads: int = 2, layout: str = "causal_context", max_positions: int = 2048,
    identifier_only: bool = True,
) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = train_tokenizer(sample_corpus(), vocab_size)
    ids = special_ids(tokenizer)
    cfg = EmbeddedConfig(
        vocab_size=tokenizer.get_vocab_size(), dim=dim, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=n_kv_heads, ffn_dim=dim * 2, max_positions=max_positions, attention_layout=layout,
        mask_token_id=ids["mask"], pad_token_id=ids["pad"], eos_token_id=ids["eos"],
    )
    torch.manual_seed(seed)
    model = EmbeddedModel(cfg)
    # Random init at std 0.02 gives near-uniform logits; widen it so greedy choices differ by position.
    with torch.no_grad():
        model.embed.weight.mul_(25.0)
        # Tied head: zero rows make mask/pad/eos logits 0, so random models rarely end a span at once.
        for special in ids.values():
            model.embed.weight[special].zero_()
        if identifier_only:
            for token_id in range(cfg.vocab_size):
                if not IDENTIFIER_PIECE.fullmatch(tokenizer.decode([token_id])):
                    model.embed.weight[token_id].zero_()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps(cfg.to_json(), indent=2) + "\n")
    (folder / "MODEL_CARD.md").write_text(
        "# tiny random model\n\nRandomly initialised, untrained: for protocol and shape tests only.\n"
    )
    return folder

"""Which tokens hold a line break is a tokenizer-level table, the engine's (TokenIndex.line_breaks),
not the block-diffusion model port's: the port answers forward passes only. The table read from
decoded token texts is the one the port read from vocabulary strings (byte-level `Ċ`,
SentencePiece `<0x0A>`), on every tiny block layout and the embedded tokenizer."""
from __future__ import annotations

import pytest
import torch

from dllm_lsp.checkpoints.block_denoiser import BlockDenoiser
from dllm_lsp.checkpoints.block_tiny import BLOCK_LAYOUTS, FAMILY_OF, write_tiny_block_checkpoint
from dllm_lsp.engine.blockwise import decode_blockwise
from dllm_lsp.engine.denoiser import BlockDiffusionPort
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model

BLOCK = [layout for layout in BLOCK_LAYOUTS if FAMILY_OF[layout].attention == "block"]


def from_vocabulary(tokenizer, size: int) -> torch.Tensor:
    """The port's former reading: vocabulary strings that spell a line break."""
    flags = torch.zeros(size, dtype=torch.bool)
    for text, token in tokenizer.get_vocab(with_added_tokens=True).items():
        if token < size and ("Ċ" in text or "\n" in text or text == "<0x0A>"):
            flags[token] = True
    return flags


@pytest.fixture(scope="module")
def engines(tmp_path_factory, tiny_model_dir) -> dict[str, Engine]:
    root = tmp_path_factory.mktemp("line-breaks")
    models = {layout: load_model(str(write_tiny_block_checkpoint(root / layout, layout)), "cpu")
              for layout in BLOCK_LAYOUTS}
    models["embedded"] = load_model(tiny_model_dir, "cpu")
    return {name: Engine(model, batching=False) for name, model in models.items()}


@pytest.mark.parametrize("name", [*BLOCK_LAYOUTS, "embedded"])
def test_the_engine_table_is_the_one_the_port_read(engines, name):
    index = engines[name].token_index()
    table = index.line_breaks("cpu")
    assert torch.equal(table, from_vocabulary(engines[name].denoiser.tokenizer, index.size))
    assert table.any()


def test_the_block_port_answers_forward_passes_only():
    assert not hasattr(BlockDenoiser, "newline_ids") and not hasattr(BlockDiffusionPort, "newline_ids")


@pytest.mark.parametrize("layout", BLOCK)
def test_a_one_line_block_slot_reads_the_engine_table(engines, layout):
    engine = engines[layout]
    request = InfillRequest.single("def f(x):\n    return ", "\n", 12, single_line=True)
    canvas, settings = engine.canvas(request), DecodeSettings(steps=2)
    with pytest.raises(ValueError, match="TokenIndex"):
        decode_blockwise(engine.denoiser, canvas, settings)
    alone = decode_blockwise(engine.denoiser, canvas, settings, tokens=engine.token_index())
    # the engine hands its own table to the run it makes: the same tokens as the loop given it
    assert engine.infill(request, settings).candidates[0] == engine.decode_slots((12,), alone.span_ids, None)[0]

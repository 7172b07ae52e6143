"""Special tokens against text that spells them: a file's `"<pad>"` or JSX's `</s>` is code, read
and written as plain text; only the model's own special tokens end a slot or are left out of it."""
from __future__ import annotations

import pytest
import torch

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.checkpoints.block_tiny import write_tiny_block_checkpoint
from dllm_lsp.checkpoints.tiny import write_tiny_checkpoint
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import InfillRequest
from dllm_lsp.loader import load_model
from dllm_lsp.planner.spans import plan_span
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax.snapshot import Snapshot

USER_TEXT = 'tok.pad_token = "<pad>"  # <mask> <eos> </s> <|endoftext|> <|im_end|> <|mask|> <|MASK|>'


@pytest.fixture(scope="module", params=["embedded", "dream", "llada", "sdar"])
def engine(request, tmp_path_factory) -> Engine:
    folder = tmp_path_factory.mktemp(request.param) / request.param
    if request.param == "embedded":
        write_tiny_model(folder)
    elif request.param == "sdar":
        write_tiny_block_checkpoint(folder, "sdar")
    else:
        write_tiny_checkpoint(folder, request.param)
    return Engine(load_model(str(folder), "cpu"))


def added_ids(engine: Engine) -> dict[str, int]:
    return {added.content: i for i, added in engine.denoiser.tokenizer.get_added_tokens_decoder().items()}


def test_the_users_text_never_becomes_a_special_token(engine):
    specials = set(added_ids(engine).values())
    ids = engine.denoiser.encode(USER_TEXT)
    assert not specials & set(ids), "text that spells a special token was read as the token"
    assert engine.denoiser.decode(ids) == USER_TEXT
    # the canvas (its incremental token cache) encodes with the same tokenizer
    canvas = engine.canvas(InfillRequest.single(USER_TEXT, "\n" + USER_TEXT, 4))
    context = set(canvas.ids[canvas.context_mask()].tolist()) - {engine.denoiser.special.bos_id}
    assert not specials & context


def test_a_slot_keeps_text_spelling_markers_and_ends_at_the_models_end_marker(engine):
    denoiser = engine.denoiser
    ids = added_ids(engine)
    spelt = denoiser.encode('"<pad>" </s>')
    end_marker = next(ids[t] for t in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<eos>") if t in ids)
    filler = next((ids[t] for t in ("<|im_start|>", "<|startoftext|>", "<|fim_pad|>") if t in ids), None)
    row = spelt + ([filler] if filler is not None else []) + denoiser.encode(" x") + [end_marker] + denoiser.encode("y")
    (texts,) = engine.decode_slots((len(row),), torch.tensor([row]), None)
    assert texts == ['"<pad>" </s> x']


def test_finish_keeps_marker_text_the_model_wrote():
    plan = plan_span(Snapshot.parse("tok.pad_token = \n", "python"), 16)
    assert finish(plan, '"<pad>"') == '"<pad>"'
    jsx = "const price = () => <p>\n"
    plan = plan_span(Snapshot.parse(jsx, "typescriptreact"), len(jsx) - 1)
    assert finish(plan, "<s>10</s></p>;") == "<s>10</s></p>;"

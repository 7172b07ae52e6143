"""The mask is never a span's token: a decoding rule the engine applies in every loop
(`denoise.never_mask`), not one each model port must remember.

The open checkpoints' logits are the model's scores (the mask's included, cut at the
tokenizer's size); each loop, fixed-length, variable-length (DreamOn) and block-wise, keeps the
mask out of its choices. Here the model is made to score the mask first everywhere: every loop
still writes real tokens.
"""
from __future__ import annotations

import pytest

from dllm_lsp.checkpoints import denoiser as denoiser_module
from dllm_lsp.checkpoints import session as session_module
from dllm_lsp.checkpoints.block_tiny import write_tiny_block_checkpoint
from dllm_lsp.engine.denoise import run_alone
from dllm_lsp.engine.engine import RUNS, Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model

REQUEST = InfillRequest.single("def f(x):\n    return ", "\n", 8)


def _decode(model, settings: DecodeSettings):
    canvas = Engine(model).canvas(REQUEST)
    return run_alone(lambda: RUNS[model.decoding](model, canvas, settings), lambda: False)


@pytest.mark.parametrize("layout", ["llada", "dream", "dreamon"])
def test_no_checkpoint_loop_writes_the_mask_its_model_scores_first(layout, loaded, monkeypatch):
    model = loaded[layout]
    mask = model.special.mask_id
    assert mask < model.vocab_limit          # the model can score it: the rule is what keeps it out
    real = session_module.span_logits

    def mask_first(net, hidden, vocab_limit):
        out = real(net, hidden, vocab_limit)
        out[..., mask] = 1e4
        return out

    monkeypatch.setattr(session_module, "span_logits", mask_first)
    monkeypatch.setattr(denoiser_module, "span_logits", mask_first)
    for settings in (DecodeSettings(steps=4, threshold=0.5), DecodeSettings(steps=2, n=2, temperature=0.7)):
        out = _decode(model, settings)
        assert not (out.span_ids == mask).any(), (layout, settings, out.span_ids.tolist())


def test_the_block_loop_writes_no_mask_a_block_checkpoint_scores_first(tmp_path, monkeypatch):
    model = load_model(str(write_tiny_block_checkpoint(tmp_path / "sdar", "sdar")), "cpu")
    assert model.decoding == "blockwise"
    mask = model.special.mask_id
    real = model._logits

    def mask_first(hidden):
        out = real(hidden)
        out[..., mask] = 1e4
        return out

    monkeypatch.setattr(model, "_logits", mask_first)
    out = _decode(model, DecodeSettings(steps=2, threshold=0.5))
    assert not (out.span_ids == mask).any(), out.span_ids.tolist()

"""The flex-attention training path computes exactly what the SDPA + boolean-mask path does.

Torch has no flex backward on the CPU, so here the forward passes are compared (eager flex,
no grad); the loop only picks flex for a compiled CUDA run, and refuses it on the CPU.
"""
import warnings
from pathlib import Path

import pytest
import torch

from dllm_lsp.arch.embedded import EmbeddedConfig, EmbeddedModel
from dllm_lsp.train.loop import TrainOptions, training_attention


@pytest.mark.parametrize("layout", ["causal_context", "bidirectional"])
def test_flex_attention_matches_the_masked_path(layout):
    torch.manual_seed(0)
    model = EmbeddedModel(EmbeddedConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64,
                                         max_positions=256, attention_layout=layout)).eval()
    # 150 tokens: more than one 128-token flex block, slots in both blocks, a different layout per window.
    ids = torch.randint(3, 64, (3, 150))
    is_span = torch.zeros(3, 150, dtype=torch.bool)
    is_span[0, 10:17] = True
    is_span[1, 3:5] = True
    is_span[1, 126:140] = True
    is_span[2, 149] = True
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # "flex_attention called without torch.compile"
        masked = model(ids, is_span)
        model.training_attention = "flex"
        flex = model(ids, is_span)
    assert torch.allclose(masked, flex, atol=1e-5), (masked - flex).abs().max()


def test_the_loop_picks_flex_only_for_a_compiled_cuda_run():
    opts = TrainOptions(corpus=Path("c"), out=Path("o"), tokenizer=Path("t"))
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert training_attention(opts, cpu) == "mask"
    assert training_attention(TrainOptions(**{**opts.__dict__, "compile": True}), cuda) == "flex"
    assert training_attention(opts, cuda) == "mask"
    with pytest.raises(ValueError, match="CUDA only"):
        training_attention(TrainOptions(**{**opts.__dict__, "attention": "flex"}), cpu)

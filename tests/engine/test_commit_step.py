"""One step's rules and decisions (`denoise.constrain`, `denoise.commit_step`) for both loops.

The fixed-length loop (denoise.py) and the block-wise loop (blockwise.py) had each their own copy
of a step: proposals, the typed start held in order, ends decided at the frontier, the step's
commits, the typed start's forced frontiers. The copies had drifted: only the fixed loop kept the
mask out of its own choices (`never_mask`); the block loop trusted its model port to. A port
whose head scores the mask (as the embedded model's does) had the block loop commit masks as
tokens: span positions that read as undecided to everything after the loop.
"""
from __future__ import annotations

import torch

from dllm_lsp.checkpoints.block_denoiser import random_block_denoiser
from dllm_lsp.checkpoints.block_model import BlockConfig
from dllm_lsp.engine import blockwise, denoise
from dllm_lsp.engine.blockwise import decode_blockwise
from dllm_lsp.engine.denoiser import Canvas
from dllm_lsp.engine.types import DecodeSettings

TINY = BlockConfig(vocab_size=1024, dim=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, ffn_dim=64,
                   rope_theta=10000.0, norm_eps=1e-6)


def _mask_loving_port():
    """A block port whose logits put the mask first everywhere (no port-side blocking)."""
    port = random_block_denoiser(TINY, dtype=torch.float32, block_size=4, seed=3)

    def logits(hidden: torch.Tensor) -> torch.Tensor:
        out = port.model.head(hidden)[..., :port.vocab_limit].float()
        out[..., port.special.mask_id] = 1e4
        return out

    port._logits = logits
    return port


def _canvas(port, prefix: str, width: int) -> Canvas:
    context = port.encode(prefix)
    return Canvas(torch.tensor(context + [port.special.mask_id] * width + port.encode("\n")),
                  [(len(context), len(context) + width)])


def test_the_block_loop_never_commits_the_mask_whatever_the_port_scores():
    port = _mask_loving_port()
    mask = port.special.mask_id
    for settings in (DecodeSettings(steps=2, threshold=0.5), DecodeSettings(steps=1, threshold=1.0),
                     DecodeSettings(steps=2, n=2, temperature=0.8, threshold=0.5)):
        out = decode_blockwise(port, _canvas(port, "def f(x):\n    return ", 9), settings)
        assert not (out.span_ids == mask).any(), (settings, out.span_ids.tolist())


def test_never_mask_leaves_a_mask_past_the_logits_alone():
    logits = torch.zeros(2, 5)
    denoise.never_mask(logits, 3)
    assert torch.isinf(logits[:, 3]).all() and (logits[:, [0, 1, 2, 4]] == 0).all()
    denoise.never_mask(logits, 7)      # a mask id only the embedding has: nothing to do
    assert logits.shape == (2, 5)


def test_both_loops_decide_with_the_one_step():
    assert blockwise.commit_step is denoise.commit_step and blockwise.constrain is denoise.constrain

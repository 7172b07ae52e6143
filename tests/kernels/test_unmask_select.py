"""Fused unmask-select: the Triton kernel (interpreted on CPU) against the torch reference.

Greedy selection must agree exactly on the token (ties go to the first index, as torch.argmax)
and within 2e-6 absolute on probability and margin, 2e-5 relative on entropy (fp32
accumulation in another order). bf16 logits are compared with the reference on the same
values. Sampling uses Triton's own random stream, so it is tested by its properties.
"""
import math

import pytest
import torch

from dllm_lsp.kernels.unmask_select import (
    Selection, first_of_ties, unmask_select, unmask_select_reference, unmask_select_triton,
)


def assert_same_selection(got: Selection, want: Selection) -> None:
    assert got.token.dtype == torch.int64 and got.prob.dtype == torch.float32
    assert torch.equal(got.token, want.token)
    torch.testing.assert_close(got.prob, want.prob, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(got.margin, want.margin, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(got.entropy, want.entropy, atol=2e-5, rtol=2e-5)


# (rows, vocab, block_v, target programs): block_v / targets force several blocks and splits.
SHAPES = [
    pytest.param(1, 1, None, None, id="vocab1"),
    pytest.param(2, 17, 16, None, id="vocab17-two-blocks"),
    pytest.param(3, 1000, 64, 12, id="splits-and-blocks"),
    pytest.param(5, 3001, 128, None, id="odd-vocab"),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("rows,vocab,block_v,target", SHAPES)
def test_greedy_matches_reference(rows, vocab, block_v, target, dtype):
    g = torch.Generator().manual_seed(rows * vocab)
    logits = (torch.randn(rows, vocab, generator=g) * 4).to(dtype)
    got = unmask_select_triton(logits, block_v=block_v, target_programs=target)
    assert_same_selection(got, unmask_select_reference(logits))


def test_qwen_sized_vocabulary():
    """One row over a 152,064-wide vocabulary, split many ways."""
    g = torch.Generator().manual_seed(7)
    logits = torch.randn(1, 152064, generator=g) * 3
    logits[0, 151000] = 25.0
    got = unmask_select_triton(logits, block_v=4096, target_programs=16)
    assert_same_selection(got, unmask_select_reference(logits))
    assert int(got.token) == 151000


def test_ties_and_masked_vocabulary():
    logits = torch.tensor([
        [0.0, 2.0, 2.0, -1.0, float("-inf")],      # tie: first index wins, margin 0
        [float("-inf"), float("-inf"), 5.0, 1.0, 1.0],
        [3.0, 1.0, 3.0, 3.0, 0.0],
    ])
    got = unmask_select_triton(logits, block_v=16)
    want = unmask_select_reference(logits)
    assert_same_selection(got, want)
    assert got.token.tolist() == [1, 2, 0]
    assert float(got.margin[0]) == 0.0 and float(got.margin[2]) == 0.0
    # Ties split across blocks and splits: the first index still wins.
    wide = torch.zeros(1, 300)
    wide[0, [40, 170, 299]] = 9.0
    assert int(unmask_select_triton(wide, block_v=32, target_programs=8).token) == 40


def test_first_of_ties_with_and_without_a_device_sync():
    # The GPU's sync-free form (what a CUDA graph can capture) picks what the CPU's form picks.
    logits = torch.tensor([[0.0, 2.0, 2.0, -1.0], [4.0, 1.0, 4.0, 4.0], [1.0, 3.0, 0.0, 2.0]])
    top = logits.topk(2, dim=-1)
    shuffled = top.indices[:, 0].clone()
    shuffled[0], shuffled[1] = 2, 3           # what a topk that breaks ties otherwise could return
    tie = top.values[:, 0] == top.values[:, 1]
    for sync_free in (False, True):
        assert first_of_ties(logits, shuffled, tie, sync_free).tolist() == [1, 0, 1]
    assert shuffled.tolist()[:2] == [2, 3]    # the caller's indices are not written over


def test_large_and_negative_logits_are_stable():
    logits = torch.tensor([[1e4, 1e4 - 1.0, -1e4, 0.0], [-500.0, -501.0, -502.0, -503.0]])
    assert_same_selection(unmask_select_triton(logits, block_v=16), unmask_select_reference(logits))


def sample(logits, temperature, seed):
    return unmask_select_triton(logits, temperature, torch.Generator().manual_seed(seed), block_v=16)


def test_sampling_properties():
    rows = 24
    logits = torch.tensor([[0.0, 3.0, -2.0]]).repeat(rows, 1)
    hot = sample(logits, 100.0, seed=1)
    # p(token) is reported under softmax(logits), not the tempered distribution.
    p = torch.softmax(logits[0], -1)
    torch.testing.assert_close(hot.prob, p[hot.token], atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(hot.entropy, unmask_select_reference(logits).entropy, atol=2e-5, rtol=2e-5)
    # Near-uniform at T=100 (p ~ 1/3 each): rows draw independently, so several tokens appear.
    counts = torch.bincount(hot.token, minlength=3)
    assert (counts > 0).sum() >= 2, counts
    assert counts.max() <= 18, counts              # P(>18 of 24 at p=0.36) < 1e-5
    # Same generator seed -> same draws; another seed -> other draws.
    assert torch.equal(sample(logits, 100.0, seed=1).token, hot.token)
    assert not torch.equal(sample(logits, 100.0, seed=2).token, hot.token)
    # A cold temperature collapses onto the argmax (p(other) ~ e^-60).
    assert sample(logits[:4], 0.05, seed=3).token.tolist() == [1, 1, 1, 1]


def test_zero_rows_and_bad_input():
    empty = unmask_select_triton(torch.zeros(0, 10))
    assert empty.token.shape == (0,)
    with pytest.raises(ValueError, match="rows, vocab"):
        unmask_select_triton(torch.zeros(10))
    with pytest.raises(ValueError, match="temperature"):
        unmask_select_triton(torch.zeros(2, 10), temperature=-1.0)
    with pytest.raises(ValueError, match="floating"):
        unmask_select_triton(torch.zeros(2, 10, dtype=torch.long))


def test_dispatch_uses_reference_on_cpu_by_default(monkeypatch):
    monkeypatch.delenv("DLLM_LSP_KERNELS", raising=False)
    logits = torch.randn(3, 50)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(unmask_select(logits, 0.8, g1).token, unmask_select_reference(logits, 0.8, g2).token)
    assert math.isclose(float(unmask_select(logits).entropy.sum()), float(unmask_select_reference(logits).entropy.sum()))

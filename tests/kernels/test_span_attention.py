"""Span attention: the Triton kernel (interpreted on CPU) against the torch reference, and the
reference against the two attention layouts (docs/kernels.md, span attention) written out as
full-canvas masks.

Tolerances: fp32 inputs 2e-5 absolute/relative (the kernel accumulates in fp32 in a different
order); bf16 inputs 2e-2 against an fp32 reference on the same bf16 values (one bf16 rounding
of the output, and on GPU one of the probabilities before the P@V product).
"""
import pytest
import torch
import torch.nn.functional as F

from dllm_lsp.arch.embedded import layout_mask
from dllm_lsp.kernels.span_attention import (
    plan_splits, span_attention, span_attention_ragged, span_attention_reference, span_attention_triton,
)

TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}

# (batch, heads, kv heads, L, N, head dim, context batch, keys per split)
SHAPES = [
    pytest.param(2, 2, 2, 5, 37, 24, 1, 16, id="gqa1-odd-shapes-many-splits-shared-ctx"),
    pytest.param(1, 8, 2, 3, 50, 32, 1, None, id="gqa4-planned-splits"),
    pytest.param(1, 7, 1, 9, 20, 64, 1, None, id="gqa7"),
    pytest.param(2, 4, 1, 1, 1, 16, 2, None, id="L1-N1-per-batch-ctx"),
    pytest.param(1, 2, 1, 40, 19, 16, 1, None, id="two-query-blocks"),
    pytest.param(1, 2, 2, 4, 0, 16, 1, None, id="empty-context"),
]


def make_inputs(b, h, hkv, l, n, d, ctx_b, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    # q as the model makes it: a transposed view of [B, L, H, D], not contiguous.
    q = torch.randn(b, l, h, d, generator=g).transpose(1, 2).to(dtype)
    k_ctx, v_ctx = (torch.randn(ctx_b, hkv, n, d, generator=g).to(dtype) for _ in range(2))
    k_span, v_span = (torch.randn(b, l, hkv, d, generator=g).transpose(1, 2).to(dtype) for _ in range(2))
    return q, k_ctx, v_ctx, k_span, v_span


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("b,h,hkv,l,n,d,ctx_b,kps", SHAPES)
def test_kernel_matches_reference(b, h, hkv, l, n, d, ctx_b, kps, dtype):
    inputs = make_inputs(b, h, hkv, l, n, d, ctx_b, dtype)
    out = span_attention_triton(*inputs, keys_per_split=kps)
    expected = span_attention_reference(*(t.float() for t in inputs))
    assert out.shape == (b, h, l, d) and out.dtype == dtype
    assert out.transpose(1, 2).is_contiguous()     # o_proj's input is a view, not a copy
    torch.testing.assert_close(out.float(), expected, **TOL[dtype])


@pytest.mark.parametrize("one_launch", [True, False], ids=["one-launch", "split-merge"])
@pytest.mark.parametrize("b,h,hkv,l,n,d,ctx_b,kps", SHAPES)
def test_one_launch_and_split_merge_agree_with_the_reference(b, h, hkv, l, n, d, ctx_b, kps, one_launch):
    # Forced either way whatever the plan: one program per query block over the whole context
    # and span (no merge), or the context's splits plus the span's, merged.
    inputs = make_inputs(b, h, hkv, l, n, d, ctx_b, torch.float32, seed=5)
    out = span_attention_triton(*inputs, keys_per_split=kps, one_launch=one_launch)
    assert out.transpose(1, 2).is_contiguous()
    torch.testing.assert_close(out, span_attention_reference(*inputs), **TOL[torch.float32])


def test_explicit_scale():
    inputs = make_inputs(1, 4, 2, 3, 21, 16, 1, torch.float32, seed=3)
    out = span_attention_triton(*inputs, scale=0.37)
    torch.testing.assert_close(out, span_attention_reference(*inputs, scale=0.37), **TOL[torch.float32])


def test_split_plan_covers_context_and_fills_the_device():
    # Dream-7B at L=32: 4 kv heads x 4 query blocks of 64 rows per split; an H100 has 132 SMs.
    kps, splits = plan_splits(2048, programs_per_split=16, block_n=64, target_programs=264)
    assert kps % 64 == 0 and (splits - 1) * kps < 2048 <= splits * kps
    assert splits * 16 >= 132
    assert plan_splits(2048, 4, 64, 264) == (64, 32)     # never below one key block per split
    assert plan_splits(0, 4, 64, 264) == (64, 0)
    assert plan_splits(10, 4, 64, 264) == (64, 1)


def test_causal_context_layout_matches_full_canvas_mask():
    """Span rows under the embedded model's layout mask = span_attention over the cached context."""
    g = torch.Generator().manual_seed(1)
    t, h, d = 12, 4, 16
    is_span = torch.zeros(1, t, dtype=torch.bool)
    is_span[0, 4:8] = True                     # prefix 0..3, span 4..7, suffix 8..11
    q, k, v = (torch.randn(1, h, t, d, generator=g) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, attn_mask=layout_mask(is_span, "causal_context"))
    ctx, span = ~is_span[0], is_span[0]
    got = span_attention_triton(q[:, :, span], k[:, :, ctx], v[:, :, ctx], k[:, :, span], v[:, :, span])
    torch.testing.assert_close(got, full[:, :, span], **TOL[torch.float32])


def test_bidirectional_layout_matches_full_canvas_attention():
    """Fully bidirectional: span rows see prefix and suffix; the cached context is both, in any order."""
    g = torch.Generator().manual_seed(2)
    t, h, hkv, d = 11, 4, 1, 16
    span = torch.zeros(t, dtype=torch.bool)
    span[3:6] = True
    q = torch.randn(1, h, t, d, generator=g)
    k, v = (torch.randn(1, hkv, t, d, generator=g) for _ in range(2))
    full = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    got = span_attention_triton(q[:, :, span], k[:, :, ~span], v[:, :, ~span], k[:, :, span], v[:, :, span])
    torch.testing.assert_close(got, full[:, :, span], **TOL[torch.float32])


def test_dispatch_uses_reference_on_cpu_by_default(monkeypatch):
    monkeypatch.delenv("DLLM_LSP_KERNELS", raising=False)
    inputs = make_inputs(1, 2, 1, 2, 3, 16, 1, torch.float32)
    assert torch.equal(span_attention(*inputs), span_attention_reference(*inputs))


@pytest.mark.parametrize("bad,message", [
    (lambda q, kc, vc, ks, vs: (q[0], kc, vc, ks, vs), "4-D"),
    (lambda q, kc, vc, ks, vs: (q[:, :3], kc, vc, ks, vs), "multiple"),
    (lambda q, kc, vc, ks, vs: (q, kc, vc[:, :, :2], ks, vs), "same shape"),
    (lambda q, kc, vc, ks, vs: (q, kc, vc, ks[..., :8], vs[..., :8]), "k_span"),
    (lambda q, kc, vc, ks, vs: (q, kc.double(), vc.double(), ks, vs), "dtype"),
])
def test_bad_shapes_raise_clear_errors(bad, message):
    inputs = make_inputs(1, 4, 2, 3, 5, 16, 1, torch.float32)
    with pytest.raises(ValueError, match=message):
        span_attention_triton(*bad(*inputs))


def test_ragged_rows_of_several_requests_attend_each_to_their_own():
    """`span_attention_ragged` (a shared step): each request's rows get what they get alone."""
    torch.manual_seed(0)
    heads, kv_heads, d = 4, 2, 16
    shapes = [(1, 5), (3, 2), (2, 7)]                    # (B_r, S_r) per request
    contexts = [(torch.randn(b if i != 1 else 1, kv_heads, n_ctx, d), torch.randn(b if i != 1 else 1, kv_heads, n_ctx, d))
                for i, ((b, _), n_ctx) in enumerate(zip(shapes, (9, 4, 13)))]   # request 1's context shared by its rows
    alone = [(torch.randn(b, heads, s, d), torch.randn(b, kv_heads, s, d), torch.randn(b, kv_heads, s, d)) for b, s in shapes]

    def flat(ts):   # [B, H, S, D] per request -> one [1, H, sum B*S, D] sequence, batch-major
        return torch.cat([t.transpose(0, 1).reshape(t.shape[1], -1, d) for t in ts], 1)[None]

    got = span_attention_ragged(flat([a[0] for a in alone]), flat([a[1] for a in alone]), flat([a[2] for a in alone]),
                                shapes, contexts)
    want = flat([span_attention(q, kc, vc, k, v) for (q, k, v), (kc, vc) in zip(alone, contexts)])
    torch.testing.assert_close(got, want)

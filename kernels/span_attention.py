"""Span attention: L span queries against N cached context keys plus the span itself.

Layouts (docs/kernels.md, span attention): in "causal context / bidirectional span" every span
query sees every context key and every span key, so no mask is needed; a fully bidirectional
model calls this the same way with its (approximately) cached prefix/suffix keys as the context.

`span_attention` dispatches: the Triton kernel on CUDA, the torch reference elsewhere
(kernels/dispatch.py holds the whole policy).

The Triton kernel is flash-decoding shaped, because L is small (<= 128) and N large:
  - GQA packing: the G = H / Hkv query heads that share a key/value head are stacked with
    the L span rows into one block of G*L query rows, so each key/value tile is read once
    per kv head and the tensor cores get a tall enough M;
  - split-K: the N context keys are cut into splits that run as separate programs (one
    extra split takes the L span keys), each writing a partial output and its log-sum-exp;
  - a second small kernel merges the splits (weights exp(lse_s - max lse)).
Where the plan has at most one context split (a short context, or enough query blocks to fill
the GPU without splitting), one program per query block attends the whole context and the span
and writes the output itself: one launch, no partials, no merge.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .dispatch import (
    KernelInputError, interpreting, multiprocessor_count, next_power_of_2,
    run_kernel, triton_available, use_triton, worth_running,
)

LOG2E = 1.4426950408889634
MERGE_ROWS = 16   # output rows per merge program


def span_attention_reference(
    q: torch.Tensor, k_ctx: torch.Tensor, v_ctx: torch.Tensor, k_span: torch.Tensor, v_span: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """q [B, H, L, D]; k_ctx/v_ctx [B or 1, Hkv, N, D]; k_span/v_span [B, Hkv, L, D] -> [B, H, L, D]."""
    batch = q.shape[0]
    if k_ctx.shape[0] != batch:
        k_ctx, v_ctx = k_ctx.expand(batch, -1, -1, -1), v_ctx.expand(batch, -1, -1, -1)
    k = torch.cat([k_ctx, k_span], dim=2)
    v = torch.cat([v_ctx, v_span], dim=2)
    return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


def span_attention(
    q: torch.Tensor, k_ctx: torch.Tensor, v_ctx: torch.Tensor, k_span: torch.Tensor, v_span: torch.Tensor,
    scale: float | None = None,
) -> torch.Tensor:
    """Triton on CUDA, the torch reference elsewhere, as kernels/dispatch.py decides (its policy
    keeps fp32 on CUDA and, under "auto", short contexts on SDPA)."""
    if use_triton(q, k_ctx, v_ctx, k_span, v_span) and worth_running("span_attention", k_ctx.shape[2], q):
        return run_kernel("span_attention", span_attention_triton, span_attention_reference,
                          q, k_ctx, v_ctx, k_span, v_span, scale)
    return span_attention_reference(q, k_ctx, v_ctx, k_span, v_span, scale)


def span_attention_ragged(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shapes: list[tuple[int, int]],
                          contexts: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Several requests' span rows back to back in one sequence (a shared denoising step):
    q [1, H, T, D], k/v [1, Hkv, T, D], request r owning B_r x S_r rows (`shapes[r]`,
    batch-major) and attending to its own cached context `contexts[r]` (k_ctx, v_ctx
    [B_r or 1, Hkv, N_r, D]) and its own rows -> [1, H, T, D]. One `span_attention` per request:
    nothing padded, nothing copied between requests."""
    heads, d = q.shape[1], q.shape[3]
    parts, off = [], 0
    for (b, n), (k_ctx, v_ctx) in zip(shapes, contexts):
        if not b * n:          # a request with no span rows in this pass (its context alone)
            continue
        q_r, k_r, v_r = (t[0, :, off:off + b * n].reshape(t.shape[1], b, n, d).transpose(0, 1)
                         for t in (q, k, v))                                   # [B_r, heads, S_r, D]
        y = span_attention(q_r, k_ctx, v_ctx, k_r, v_r)
        parts.append(y.transpose(0, 1).reshape(heads, b * n, d))
        off += b * n
    return torch.cat(parts, 1)[None] if parts else q[:, :, :0]


def check_shapes(q, k_ctx, v_ctx, k_span, v_span) -> None:
    for name, t in (("q", q), ("k_ctx", k_ctx), ("v_ctx", v_ctx), ("k_span", k_span), ("v_span", v_span)):
        if t.dim() != 4:
            raise KernelInputError(f"span_attention: {name} must be 4-D [B, heads, T, D], got shape {tuple(t.shape)}")
    b, h, l, d = q.shape
    if k_span.shape != v_span.shape or k_ctx.shape != v_ctx.shape:
        raise KernelInputError("span_attention: keys and values must have the same shape "
                         f"(ctx {tuple(k_ctx.shape)} vs {tuple(v_ctx.shape)}, span {tuple(k_span.shape)} vs {tuple(v_span.shape)})")
    hkv = k_span.shape[1]
    if k_span.shape != (b, hkv, l, d):
        raise KernelInputError(f"span_attention: k_span must be [B={b}, Hkv, L={l}, D={d}], got {tuple(k_span.shape)}")
    if k_ctx.shape[0] not in (1, b) or k_ctx.shape[1] != hkv or k_ctx.shape[3] != d:
        raise KernelInputError(f"span_attention: k_ctx must be [1 or {b}, {hkv}, N, {d}], got {tuple(k_ctx.shape)}")
    if hkv == 0 or h % hkv:
        raise KernelInputError(f"span_attention: query heads ({h}) must be a multiple of key/value heads ({hkv})")
    if len({t.dtype for t in (q, k_ctx, v_ctx, k_span, v_span)}) != 1:
        raise KernelInputError("span_attention: q, k and v must share one dtype")


if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _attend_range(acc, m_i, l_i, q, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                      start, end, d_offs, d_ok, qk_scale,
                      BLOCK_N: tl.constexpr, DOT_FP32: tl.constexpr, IEEE: tl.constexpr):
        """Online softmax (base 2) of the query block over keys [start, end) of one key/value tensor."""
        for n0 in range(start, end, BLOCK_N):
            n_offs = n0 + tl.arange(0, BLOCK_N)
            n_ok = n_offs < end
            kv_mask = n_ok[:, None] & d_ok[None, :]
            k = tl.load(k_base + n_offs[:, None] * stride_kn + d_offs[None, :] * stride_kd, mask=kv_mask, other=0.0)
            v = tl.load(v_base + n_offs[:, None] * stride_vn + d_offs[None, :] * stride_vd, mask=kv_mask, other=0.0)
            if DOT_FP32:   # the interpreter's bf16 dot is wrong, and fp32 inputs want an exact dot
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            if IEEE:
                qk = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                qk = tl.dot(q, tl.trans(k))
            qk = tl.where(n_ok[None, :], qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(qk - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            if IEEE:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        return acc, m_i, l_i

    @triton.jit
    def _span_attention_split_kernel(
        Q, KC, VC, KS, VS, O_PART, LSE_PART, OUT,
        sq_b, sq_h, sq_l, sq_d,
        skc_b, skc_h, skc_n, skc_d,
        svc_b, svc_h, svc_n, svc_d,
        sks_b, sks_h, sks_n, sks_d,
        svs_b, svs_h, svs_n, svs_d,
        L, N, D, G, n_kv_heads, n_heads, keys_per_split, n_splits, qk_scale,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        DOT_FP32: tl.constexpr, IEEE: tl.constexpr, ONE_PASS: tl.constexpr,
    ):
        """Split pid_s of the keys for one query block of one (batch, kv head). ONE_PASS: the only
        split, over the whole context and then the span, writing the final output to OUT."""
        pid_bh = tl.program_id(0)
        pid_m = tl.program_id(1)
        pid_s = tl.program_id(2)
        b = pid_bh // n_kv_heads
        kvh = pid_bh % n_kv_heads
        # Query rows r in [0, G*L): head kvh*G + r // L, span row r % L.
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < G * L
        head = kvh * G + rows // L
        pos = rows % L
        d_offs = tl.arange(0, BLOCK_D)
        d_ok = d_offs < D
        q_mask = row_ok[:, None] & d_ok[None, :]
        q = tl.load(Q + b * sq_b + head[:, None] * sq_h + pos[:, None] * sq_l + d_offs[None, :] * sq_d,
                    mask=q_mask, other=0.0)
        if DOT_FP32:
            q = q.to(tl.float32)

        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        if ONE_PASS:               # the whole context, then the span: the output is final
            acc, m_i, l_i = _attend_range(
                acc, m_i, l_i, q, KC + b * skc_b + kvh * skc_h, VC + b * svc_b + kvh * svc_h,
                skc_n, skc_d, svc_n, svc_d, 0, N, d_offs, d_ok, qk_scale, BLOCK_N, DOT_FP32, IEEE)
            acc, m_i, l_i = _attend_range(
                acc, m_i, l_i, q, KS + b * sks_b + kvh * sks_h, VS + b * svs_b + kvh * svs_h,
                sks_n, sks_d, svs_n, svs_d, 0, L, d_offs, d_ok, qk_scale, BLOCK_N, DOT_FP32, IEEE)
            out = acc / l_i[:, None]
            # OUT is [B, L, H, D], as the merge kernel writes it.
            tl.store(OUT + (((b * L + pos) * n_heads + head) * D)[:, None] + d_offs[None, :],
                     out.to(OUT.dtype.element_ty), mask=q_mask)
        else:
            if pid_s < n_splits - 1:   # a slice of the cached context
                start = pid_s * keys_per_split
                end = tl.minimum(start + keys_per_split, N)
                acc, m_i, l_i = _attend_range(
                    acc, m_i, l_i, q, KC + b * skc_b + kvh * skc_h, VC + b * svc_b + kvh * svc_h,
                    skc_n, skc_d, svc_n, svc_d, start, end, d_offs, d_ok, qk_scale, BLOCK_N, DOT_FP32, IEEE)
            else:                      # the last split: the span's own keys
                acc, m_i, l_i = _attend_range(
                    acc, m_i, l_i, q, KS + b * sks_b + kvh * sks_h, VS + b * svs_b + kvh * svs_h,
                    sks_n, sks_d, svs_n, svs_d, 0, L, d_offs, d_ok, qk_scale, BLOCK_N, DOT_FP32, IEEE)

            out = acc / l_i[:, None]
            lse = m_i + tl.log2(l_i)
            # Partials are contiguous [B, H, L, S, D] and [B, H, L, S].
            part_row = ((b * n_heads + head) * L + pos) * n_splits + pid_s
            tl.store(O_PART + part_row[:, None] * D + d_offs[None, :], out, mask=q_mask)
            tl.store(LSE_PART + part_row, lse, mask=row_ok)

    @triton.jit
    def _span_attention_merge_kernel(O_PART, LSE_PART, OUT, n_rows, n_splits, D, H, L,
                                     BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
        """BLOCK_R output rows (flattened b, h, l) per program: out = sum_s w_s o_s / sum_s w_s."""
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        row_ok = rows < n_rows
        s_offs = tl.arange(0, BLOCK_S)
        d_offs = tl.arange(0, BLOCK_D)
        d_ok = d_offs < D
        lse = tl.load(LSE_PART + rows[:, None] * n_splits + s_offs[None, :],
                      mask=row_ok[:, None] & (s_offs < n_splits)[None, :], other=float("-inf"))
        top = tl.max(lse, 1)
        top = tl.where(row_ok, top, 0.0)
        total = tl.sum(tl.exp2(lse - top[:, None]), 1)
        acc = tl.zeros([BLOCK_R, BLOCK_D], dtype=tl.float32)
        for s in range(0, n_splits):
            w = tl.exp2(tl.load(LSE_PART + rows * n_splits + s, mask=row_ok, other=0.0) - top)
            part = tl.load(O_PART + (rows * n_splits + s)[:, None] * D + d_offs[None, :],
                           mask=row_ok[:, None] & d_ok[None, :], other=0.0)
            acc += w[:, None] * part
        out = acc / tl.where(row_ok, total, 1.0)[:, None]
        # The output buffer is [B, L, H, D]: the caller's transpose back to [B, L, H*D] is then free.
        b = rows // (H * L)
        h = (rows // L) % H
        pos = rows % L
        tl.store(OUT + (((b * L + pos) * H + h) * D)[:, None] + d_offs[None, :], out.to(OUT.dtype.element_ty),
                 mask=row_ok[:, None] & d_ok[None, :])


def tile_config(dtype: torch.dtype, head_dim: int, rows: int, shared_bytes: int = 227 * 1024) -> dict:
    """Compile-time parameters of the split kernel for this dtype, head size and G*L query rows.

    Sized from sm_90 builds (ptxas -v, no spills): at head dim 128, 64 x 64 key tiles with two
    pipeline stages take 144 KiB of shared memory and 167 registers; GPUs with less shared
    memory per block (Ada: 99 KiB) get 32-key tiles (80 KiB); head dim 64 takes 64-key tiles
    (72 KiB). fp32 inputs get an exact (IEEE) dot, which only the interpreter and small tiles
    afford; the dispatch policy sends fp32 on CUDA to the reference instead
    (dispatch.REFERENCE_ON_CUDA).
    """
    block_d = max(16, next_power_of_2(head_dim))
    if interpreting():
        block_n = 16   # the interpreter is slow per element; small tiles keep tests quick
    elif dtype == torch.float32:
        block_n = 16
    elif block_d >= 128:
        block_n = 64 if shared_bytes >= 160 * 1024 else 32
    else:
        block_n = 64
    exact = dtype == torch.float32
    return dict(BLOCK_M=min(64, max(16, next_power_of_2(rows))), BLOCK_N=block_n, BLOCK_D=block_d,
                DOT_FP32=interpreting() or exact, IEEE=exact, num_warps=4, num_stages=2)


def shared_memory_per_block(device: torch.device) -> int:
    if device.type != "cuda":
        return 227 * 1024
    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "shared_memory_per_block_optin", 0) or 99 * 1024)


def plan_splits(n_ctx: int, programs_per_split: int, block_n: int, target_programs: int,
                keys_per_split: int | None = None) -> tuple[int, int]:
    """(keys per context split, number of context splits): enough programs to fill the GPU."""
    if n_ctx == 0:
        return block_n, 0
    if keys_per_split is None:
        wanted = max(1, min(math.ceil(target_programs / programs_per_split), math.ceil(n_ctx / block_n)))
        keys_per_split = math.ceil(math.ceil(n_ctx / wanted) / block_n) * block_n
    return keys_per_split, math.ceil(n_ctx / keys_per_split)


def span_attention_triton(
    q: torch.Tensor, k_ctx: torch.Tensor, v_ctx: torch.Tensor, k_span: torch.Tensor, v_span: torch.Tensor,
    scale: float | None = None, keys_per_split: int | None = None, one_launch: bool | None = None,
) -> torch.Tensor:
    """The Triton path; `keys_per_split` overrides the split plan (tests use it to force many splits).

    `one_launch`: None takes one launch (no merge) where the plan has at most one context split;
    True forces it whatever the plan, False forces split + merge (the benchmark measures both).
    """
    if not triton_available():
        raise RuntimeError("span_attention_triton needs the triton package")
    check_shapes(q, k_ctx, v_ctx, k_span, v_span)
    b, h, l, d = q.shape
    hkv, n_ctx = k_span.shape[1], k_ctx.shape[2]
    group = h // hkv
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    rows = group * l
    tiles = tile_config(q.dtype, d, rows, shared_memory_per_block(q.device))
    block_m, block_n, block_d = tiles["BLOCK_M"], tiles["BLOCK_N"], tiles["BLOCK_D"]
    m_blocks = triton.cdiv(rows, block_m)
    target = 2 * multiprocessor_count(q.device)
    keys_per_split, ctx_splits = plan_splits(n_ctx, b * hkv * m_blocks, block_n, target, keys_per_split)
    one_pass = ctx_splits <= 1 if one_launch is None else one_launch
    n_splits = 1 if one_pass else ctx_splits + 1
    # Returned as a [B, H, L, D] view of a [B, L, H, D] buffer: the model's o_proj input
    # (transpose(1, 2).reshape(B, L, H*D)) becomes a view instead of a copy.
    out = torch.empty(b, l, h, d, device=q.device, dtype=q.dtype)
    if one_pass:   # the program writes `out` itself: the partials are never touched
        o_part = lse_part = out
    else:
        o_part = torch.empty(b, h, l, n_splits, d, device=q.device, dtype=torch.float32)
        lse_part = torch.empty(b, h, l, n_splits, device=q.device, dtype=torch.float32)
    # A context shared by the batch (leading dim 1) is read with batch stride 0.
    kc_strides = list(k_ctx.stride())
    vc_strides = list(v_ctx.stride())
    if k_ctx.shape[0] != b:
        kc_strides[0] = vc_strides[0] = 0
    args = (q, k_ctx, v_ctx, k_span, v_span, o_part, lse_part, out,
            *q.stride(), *kc_strides, *vc_strides, *k_span.stride(), *v_span.stride(),
            l, n_ctx, d, group, hkv, h, keys_per_split, n_splits, scale * LOG2E)
    tiles["ONE_PASS"] = one_pass
    try:
        _span_attention_split_kernel[(b * hkv, m_blocks, n_splits)](*args, **tiles)
    except triton.runtime.errors.OutOfResources:
        # A GPU with less shared memory than planned for: one pipeline stage, narrower key tiles.
        tiles.update(num_stages=1, BLOCK_N=max(16, block_n // 2))
        _span_attention_split_kernel[(b * hkv, m_blocks, n_splits)](*args, **tiles)
    if one_pass:
        return out.transpose(1, 2)
    n_rows = b * h * l
    _span_attention_merge_kernel[(triton.cdiv(n_rows, MERGE_ROWS),)](
        o_part, lse_part, out, n_rows, n_splits, d, h, l,
        BLOCK_R=MERGE_ROWS, BLOCK_S=max(2, next_power_of_2(n_splits)), BLOCK_D=block_d,
    )
    return out.transpose(1, 2)

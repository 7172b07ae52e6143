"""Fused unmask-select: per masked row, argmax, top-1 probability, top-1/top-2 margin,
entropy and an optional Gumbel-max sample, without materialising probabilities.

`unmask_select` dispatches: the Triton kernel on CUDA, the torch reference elsewhere.

The Triton kernel reads each row of logits once. The vocabulary (up to 152k for Qwen-family
models) is cut into splits so that a handful of rows still fills the GPU; each split keeps
running statistics over its columns:
  m  running max;  s = sum exp(x - m);  t = sum exp(x - m) * (x - m)   (entropy = log s - t / s)
  top-1 value and index, top-2 value, and the best Gumbel-perturbed score with its index.
A second kernel merges the splits of a row. Sampling draws its noise from Triton's Philox
generator seeded from the caller's torch.Generator, so samples follow the same distribution
as the reference's but are not the same draws.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch

from .dispatch import (
    KernelInputError, interpreting, multiprocessor_count, next_power_of_2,
    run_kernel, triton_available, use_triton,
)

MERGE_ROWS = 16   # rows per merge program


class Selection(NamedTuple):
    token: torch.Tensor     # [R] int64: the argmax, or the Gumbel-max sample when temperature > 0
    prob: torch.Tensor      # [R] fp32: probability of `token` under softmax(logits)
    margin: torch.Tensor    # [R] fp32: p(top1) - p(top2)
    entropy: torch.Tensor   # [R] fp32: entropy of softmax(logits), in nats


def gumbel_noise(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    u = torch.rand(shape, generator=generator, device=device).clamp_(1e-20, 1.0)
    return -torch.log((-torch.log(u)).clamp_min(1e-20))


def unmask_select_reference(
    logits: torch.Tensor, temperature: float = 0.0, generator: torch.Generator | None = None
) -> Selection:
    """The torch path, in few passes over the vocabulary (on a CPU it runs every step):
    top-2, then z = x - max and e = exp(z) once; probabilities and entropy come from those
    (sum e = s: p1 = 1/s, p2 = exp(top2 - max)/s, entropy = log s - sum(e z)/s)."""
    x = logits.float()
    if x.shape[-1] > 1:
        top = x.topk(2, dim=-1)
        top1, second = top.values[:, 0], top.values[:, 1]
        argmax = first_of_ties(x, top.indices[:, 0], top1 == second, sync_free=x.is_cuda)
    else:
        top1, argmax = x[:, 0], torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
        second = torch.full_like(top1, -math.inf)
    # A -inf logit (the mask id, every step) would make e * z = 0 * -inf = NaN: floored at the
    # lowest float, its e is still 0 and so is its term (cheaper than masking the product).
    z = (x - top1[:, None]).clamp_min_(torch.finfo(torch.float32).min)
    e = z.exp()
    s = e.sum(-1)
    entropy = s.log() - (e * z).sum(-1) / s
    if temperature > 0:
        token = (x / temperature + gumbel_noise(x.shape, generator, x.device)).argmax(-1)
        prob = e.gather(-1, token[:, None])[:, 0] / s
    else:
        token = argmax
        prob = 1.0 / s
    margin = 1.0 / s - (second - top1).exp() / s
    return Selection(token, prob, margin, entropy)


def first_of_ties(x: torch.Tensor, top_index: torch.Tensor, tie: torch.Tensor, sync_free: bool) -> torch.Tensor:
    """topk breaks ties in no set order; argmax takes the first index, as the kernel does.

    `sync_free` (on a GPU): no `tie.any()`, which waits for the device every step and cannot be
    captured in a CUDA graph (bench kernels' step failed its capture on the H200 on it); the
    argmax pass is paid every time instead. On a CPU the check is free and usually saves it."""
    if sync_free:
        return torch.where(tie, x.argmax(-1), top_index)
    index = top_index.clone()
    if tie.any():
        index[tie] = x[tie].argmax(-1)
    return index


def unmask_select(
    logits: torch.Tensor, temperature: float = 0.0, generator: torch.Generator | None = None
) -> Selection:
    """logits [R, V] -> Selection. Triton on CUDA, the torch reference elsewhere."""
    if use_triton(logits):
        return run_kernel("unmask_select", unmask_select_triton, unmask_select_reference,
                          logits, temperature, generator)
    return unmask_select_reference(logits, temperature, generator)


def check_logits(logits: torch.Tensor, temperature: float) -> None:
    if logits.dim() != 2:
        raise KernelInputError(f"unmask_select: logits must be [rows, vocab], got shape {tuple(logits.shape)}")
    if logits.shape[1] == 0:
        raise KernelInputError("unmask_select: the vocabulary dimension is empty")
    if not logits.dtype.is_floating_point:
        raise KernelInputError(f"unmask_select: logits must be floating point, got {logits.dtype}")
    if temperature < 0:
        raise KernelInputError(f"unmask_select: temperature must be >= 0, got {temperature}")


if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _select_split_kernel(
        X, stride_row, V, cols_per_split, n_splits, SEED, inv_temp,
        P_M, P_S, P_T, P_TOP1, P_IDX1, P_TOP2, P_GBEST, P_GIDX, P_GX,
        SAMPLE: tl.constexpr, BLOCK_V: tl.constexpr,
    ):
        row = tl.program_id(0)
        split = tl.program_id(1)
        start = split * cols_per_split
        end = tl.minimum(start + cols_per_split, V)
        lane = tl.arange(0, BLOCK_V)
        neg_inf = float("-inf")
        m = tl.full([], neg_inf, tl.float32)
        s = tl.zeros([], tl.float32)
        t = tl.zeros([], tl.float32)
        top1 = tl.full([], neg_inf, tl.float32)
        idx1 = tl.zeros([], tl.int32) + start
        top2 = tl.full([], neg_inf, tl.float32)
        g_best = tl.full([], neg_inf, tl.float32)
        g_idx = tl.zeros([], tl.int32) + start
        g_x = tl.full([], neg_inf, tl.float32)
        if SAMPLE:
            seed = tl.load(SEED)
        row_ptr = X + row.to(tl.int64) * stride_row
        for c0 in range(start, end, BLOCK_V):
            cols = c0 + lane
            ok = cols < end
            x = tl.load(row_ptr + cols, mask=ok, other=neg_inf).to(tl.float32)
            # Streaming log-sum-exp with the entropy term, guarded against all -inf prefixes.
            m_new = tl.maximum(m, tl.max(x, 0))
            shift = tl.where(m_new == neg_inf, 0.0, m_new)
            e = tl.exp(x - shift)
            alpha = tl.exp(m - shift)
            delta = tl.where(s > 0, m - shift, 0.0)
            t = alpha * (t + s * delta) + tl.sum(e * tl.where(x > neg_inf, x - shift, 0.0), 0)
            s = alpha * s + tl.sum(e, 0)
            m = m_new
            # Top-2 (ties: the first index wins, like torch.argmax; an equal runner-up counts as top-2).
            b_idx = tl.argmax(x, 0)
            b1 = tl.max(x, 0)
            b2 = tl.max(tl.where(lane == b_idx, neg_inf, x), 0)
            better = b1 > top1
            top2 = tl.where(better, tl.maximum(top1, b2), tl.maximum(top2, b1))
            idx1 = tl.where(better, c0 + b_idx, idx1)
            top1 = tl.maximum(top1, b1)
            if SAMPLE:
                u = tl.maximum(tl.rand(seed + row, cols), 1e-20)
                gumbel = -tl.log(tl.maximum(-tl.log(u), 1e-20))
                g = tl.where(ok, x * inv_temp + gumbel, neg_inf)
                gb_idx = tl.argmax(g, 0)
                gb = tl.max(g, 0)
                gx = tl.max(tl.where(lane == gb_idx, x, neg_inf), 0)
                g_better = gb > g_best
                g_idx = tl.where(g_better, c0 + gb_idx, g_idx)
                g_x = tl.where(g_better, gx, g_x)
                g_best = tl.maximum(g_best, gb)
        out = row * n_splits + split
        tl.store(P_M + out, m)
        tl.store(P_S + out, s)
        tl.store(P_T + out, t)
        tl.store(P_TOP1 + out, top1)
        tl.store(P_IDX1 + out, idx1)
        tl.store(P_TOP2 + out, top2)
        if SAMPLE:
            tl.store(P_GBEST + out, g_best)
            tl.store(P_GIDX + out, g_idx)
            tl.store(P_GX + out, g_x)

    @triton.jit
    def _select_merge_kernel(
        P_M, P_S, P_T, P_TOP1, P_IDX1, P_TOP2, P_GBEST, P_GIDX, P_GX,
        TOKEN, PROB, MARGIN, ENTROPY, n_rows, n_splits,
        SAMPLE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr,
    ):
        """BLOCK_R rows per program; each row's splits are merged along axis 1."""
        rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        row_ok = rows < n_rows
        k = tl.arange(0, BLOCK_S)
        ok = row_ok[:, None] & (k < n_splits)[None, :]
        at = rows[:, None] * n_splits + k[None, :]
        neg_inf = float("-inf")
        m = tl.load(P_M + at, mask=ok, other=neg_inf)
        s = tl.load(P_S + at, mask=ok, other=0.0)
        t = tl.load(P_T + at, mask=ok, other=0.0)
        big_m = tl.where(row_ok, tl.max(m, 1), 0.0)
        live = s > 0
        shift = tl.where(live, m - big_m[:, None], 0.0)
        w = tl.where(live, tl.exp(shift), 0.0)
        total = tl.where(row_ok, tl.sum(w * s, 1), 1.0)
        t_all = tl.sum(w * (t + s * shift), 1)
        # Probabilities as exp(x - max) / total: exact shifts, no rounding of a large log-sum-exp.
        entropy = tl.log(total) - t_all / total

        top1_k = tl.load(P_TOP1 + at, mask=ok, other=neg_inf)
        top2_k = tl.load(P_TOP2 + at, mask=ok, other=neg_inf)
        idx1_k = tl.load(P_IDX1 + at, mask=ok, other=0)
        best = tl.argmax(top1_k, 1)            # the first split holding the max: the first index overall
        is_best = k[None, :] == best[:, None]
        top1 = tl.max(top1_k, 1)
        top2 = tl.maximum(tl.max(top2_k, 1), tl.max(tl.where(is_best, neg_inf, top1_k), 1))
        idx1 = tl.sum(tl.where(is_best, idx1_k, 0), 1)
        p1 = tl.exp(top1 - big_m) / total
        margin = p1 - tl.exp(top2 - big_m) / total
        if SAMPLE:
            g_k = tl.load(P_GBEST + at, mask=ok, other=neg_inf)
            g_best = k[None, :] == tl.argmax(g_k, 1)[:, None]
            token = tl.sum(tl.where(g_best, tl.load(P_GIDX + at, mask=ok, other=0), 0), 1)
            gx = tl.max(tl.where(g_best, tl.load(P_GX + at, mask=ok, other=neg_inf), neg_inf), 1)
            prob = tl.exp(gx - big_m) / total
        else:
            token = idx1
            prob = p1
        tl.store(TOKEN + rows, token.to(tl.int64), mask=row_ok)
        tl.store(PROB + rows, prob, mask=row_ok)
        tl.store(MARGIN + rows, margin, mask=row_ok)
        tl.store(ENTROPY + rows, entropy, mask=row_ok)


def default_block_v() -> int:
    """Columns per loop iteration: 2048 on a GPU (8 per thread at 8 warps); smaller when interpreted."""
    return 1024 if interpreting() else 2048


def split_num_warps(block_v: int) -> int:
    return 8 if block_v >= 2048 else 4


def plan_vocab_splits(rows: int, vocab: int, block_v: int, target_programs: int) -> tuple[int, int]:
    """(columns per split, number of splits): split a row only while rows alone leave the GPU idle."""
    max_splits = triton.cdiv(vocab, block_v)
    wanted = max(1, min(max_splits, triton.cdiv(target_programs, max(rows, 1))))
    cols = triton.cdiv(triton.cdiv(vocab, wanted), block_v) * block_v
    return cols, triton.cdiv(vocab, cols)


def unmask_select_triton(
    logits: torch.Tensor, temperature: float = 0.0, generator: torch.Generator | None = None,
    block_v: int | None = None, target_programs: int | None = None,
) -> Selection:
    """The Triton path; `block_v` / `target_programs` override the split plan (tests use them)."""
    if not triton_available():
        raise RuntimeError("unmask_select_triton needs the triton package")
    check_logits(logits, temperature)
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    rows, vocab = logits.shape
    device = logits.device
    block_v = min(block_v or default_block_v(), max(16, next_power_of_2(vocab)))
    if target_programs is None:
        target_programs = 4 * multiprocessor_count(device)
    cols, n_splits = plan_vocab_splits(rows, vocab, block_v, target_programs)
    token = torch.empty(rows, device=device, dtype=torch.int64)
    prob, margin, entropy = (torch.empty(rows, device=device, dtype=torch.float32) for _ in range(3))
    if rows == 0:
        return Selection(token, prob, margin, entropy)
    f32 = dict(device=device, dtype=torch.float32)
    p_m, p_s, p_t, p_top1, p_top2, p_gbest, p_gx = (torch.empty(rows, n_splits, **f32) for _ in range(7))
    p_idx1, p_gidx = (torch.empty(rows, n_splits, device=device, dtype=torch.int32) for _ in range(2))
    sample = temperature > 0
    # The seed stays on the device (no host sync, CUDA-graph safe) and comes from the caller's generator.
    seed = (torch.randint(0, 2**30, (1,), generator=generator, device=device, dtype=torch.int64)
            if sample else torch.zeros(1, device=device, dtype=torch.int64))
    _select_split_kernel[(rows, n_splits)](
        logits, logits.stride(0), vocab, cols, n_splits, seed, 1.0 / temperature if sample else 1.0,
        p_m, p_s, p_t, p_top1, p_idx1, p_top2, p_gbest, p_gidx, p_gx,
        SAMPLE=sample, BLOCK_V=block_v, num_warps=split_num_warps(block_v),
    )
    _select_merge_kernel[(triton.cdiv(rows, MERGE_ROWS),)](
        p_m, p_s, p_t, p_top1, p_idx1, p_top2, p_gbest, p_gidx, p_gx,
        token, prob, margin, entropy, rows, n_splits,
        SAMPLE=sample, BLOCK_R=MERGE_ROWS, BLOCK_S=max(2, next_power_of_2(n_splits)),
    )
    return Selection(token, prob, margin, entropy)

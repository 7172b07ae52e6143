"""Building blocks shared by the embedded model and the open-checkpoint architectures."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dllm_lsp.kernels import rmsnorm, rope


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # weight * (x.float() * rsqrt(mean(x^2) + eps)).to(x.dtype); fused kernel on CUDA.
        return rmsnorm.rms_norm(x, self.weight, self.eps)


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=bias)
        self.up_proj = nn.Linear(dim, hidden, bias=bias)
        self.down_proj = nn.Linear(hidden, dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class AttentionProjections(nn.Module):
    """Grouped-query attention's projections, shared by the embedded model and the open
    checkpoints: q/k/v in (rotary applied to q and k), o out. `fuse()` makes q/k/v one matrix
    product for inference (a loaded model's layout); the separate ones stay for training and
    for the weights' names on disk."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, head_dim: int, qkv_bias: bool = False,
                 out_bias: bool = False) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.q_proj = nn.Linear(dim, n_heads * head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(dim, n_kv_heads * head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(dim, n_kv_heads * head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(n_heads * head_dim, dim, bias=out_bias)
        self.register_module("qkv_proj", None)    # set by fuse() once the weights are loaded

    def fuse(self) -> None:
        """One [q; k; v] projection instead of three (fewer launches per step); frees the separate ones."""
        fused = fused_linear((self.q_proj, self.k_proj, self.v_proj))
        del self.q_proj, self.k_proj, self.v_proj
        self.qkv_proj = fused

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x [B, T, dim] -> q [B, H, T, D], k and v [B, Hkv, T, D], rotary applied to q and k."""
        b, t, _ = x.shape
        hq, hkv = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        if self.qkv_proj is not None:
            q, k, v = self.qkv_proj(x).split((hq, hkv, hkv), dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def out(self, y: torch.Tensor) -> torch.Tensor:
        """y [B, H, T, D] -> [B, T, dim]."""
        b, _, t, _ = y.shape
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))


class FusedSwiGLU(nn.Module):
    """SwiGLU with gate and up projections in one matmul: down(silu(gate(x)) * up(x)), the
    inference layout of a loaded model (one launch fewer per layer)."""

    def __init__(self, mlp: SwiGLU) -> None:
        super().__init__()
        self.gate_up_proj = fused_linear((mlp.gate_proj, mlp.up_proj))
        self.down_proj = mlp.down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


def fuse_blocks(blocks) -> None:
    """A loaded model's blocks (each with `attn`, AttentionProjections, and `mlp`, a SwiGLU) in
    the inference layout: q/k/v and gate/up as single matrix products. Same results, three
    launches fewer per block and step; fusing again changes nothing."""
    for block in blocks:
        if block.attn.qkv_proj is None:
            block.attn.fuse()
        if isinstance(block.mlp, SwiGLU):
            block.mlp = FusedSwiGLU(block.mlp)


def fused_linear(parts: tuple[nn.Linear, ...]) -> nn.Linear:
    """One Linear whose output is the concatenation of `parts`' outputs (weights moved, not copied twice)."""
    first = parts[0]
    with torch.device("meta"):
        fused = nn.Linear(first.in_features, sum(p.out_features for p in parts), bias=first.bias is not None)
    with torch.no_grad():
        fused.weight = nn.Parameter(torch.cat([p.weight for p in parts]), requires_grad=False)
        if first.bias is not None:
            fused.bias = nn.Parameter(torch.cat([p.bias for p in parts]), requires_grad=False)
    return fused


class Rotary:
    """Rotary position embedding, rotate-half convention (Llama / Qwen2), at arbitrary positions."""

    def __init__(self, head_dim: int, theta: float) -> None:
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float64, device="cpu") / head_dim
        self.inv_freq = 1.0 / (theta**exponents)
        self._inv_freq_on: dict[torch.device, torch.Tensor] = {}

    def frequencies_on(self, device: torch.device) -> torch.Tensor:
        """inv_freq on `device`, copied there once: a copy per step would be a host-to-device
        transfer in every step (a sync, and not capturable in a CUDA graph)."""
        found = self._inv_freq_on.get(device)
        if found is None:
            found = self._inv_freq_on[device] = self.inv_freq.to(device)
        return found

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [..., T] -> cos, sin [..., T, head_dim] in `dtype`."""
        freqs = positions.to(torch.float64)[..., None] * self.frequencies_on(positions.device)
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, D]; cos/sin [T, D] or [B, T, D]. x * cos + rotate_half(x) * sin; fused kernel on CUDA."""
    return rope.apply_rotary(x, cos, sin)

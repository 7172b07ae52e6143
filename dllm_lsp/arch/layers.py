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

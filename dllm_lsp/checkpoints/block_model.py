"""The transformer behind the block-diffusion and newer open diffusion coders, in one file.

SDAR / TraDo and CoDA are Qwen3 stacks (per-head q/k RMSNorm before RoPE), Fast-dLLM v2 is a
Qwen2.5 stack (q/k/v biases), Stable-DiffCoder a Llama stack (Seed-Coder), and the MoE members
(SDAR-MoE, LLaDA-MoE, LLaDA2.0) replace the MLP with routed experts. With the attention mask
given from outside they all compute the same function: pre-RMSNorm blocks, rotate-half RoPE
(on the first `rotary_dim` channels of a head: LLaDA2 rotates half of each head), grouped-query
attention and a SwiGLU MLP or mixture of SwiGLU experts. `BlockConfig` carries the differences;
`block_families.py` maps each family's config.json and tensor names onto it.

Three ways to run it:
- `forward(ids, positions, past, mask)`: rows at `positions` attending to a KV cache `past`
  (keys/values of earlier positions, rotary applied) and to themselves, under a boolean mask
  (True = may attend; None = every row sees every key). Returns the hidden states and the rows'
  own keys/values, which the caller appends to its cache once the rows are final. This is what
  block-wise decoding uses: finished blocks in the cache, the current block as the rows.
- `full(ids, rope, keep_kv)` / `cached(ids, rope, context)` / `cached_ragged(...)`: the
  bidirectional interface of `architecture.BidirectionalLM` (`architecture.DualCachePasses`, one
  copy for both models), so the bidirectional families here
  (LLaDA-MoE, CoDA) run in the existing dual-cache session unchanged, shared steps and the
  "reuse" cache included.

Mixture of experts: a plain, correct top-k routing (each selected expert runs on its tokens; the
outputs are summed with the routing weights). Two routers:
- "softmax" (Qwen3-MoE, SDAR-MoE, LLaDA-MoE): softmax over all experts, top-k, optionally
  renormalised (`norm_topk`);
- "sigmoid" (LLaDA2.0): sigmoid scores; the experts are chosen on score + a learnt per-expert
  bias, restricted to the `topk_group` groups whose two best biased scores sum highest; the
  weights are the unbiased scores of the chosen experts, renormalised and multiplied by
  `routed_scaling`; shared experts are added for every token.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from dllm_lsp.arch.layers import Rotary
from dllm_lsp.kernels.rmsnorm import rms_norm
from dllm_lsp.kernels.rope import apply_rotary
from dllm_lsp.kernels.span_attention import span_attention, span_attention_ragged

from .architecture import DualCachePasses

KV = tuple[torch.Tensor, torch.Tensor]   # keys, values [B, Hkv, N, D], rotary already applied

ROUTERS = ("softmax", "sigmoid")


@dataclass(frozen=True)
class MoEConfig:
    n_experts: int
    top_k: int
    ffn_dim: int                    # each expert's hidden width
    router: str = "softmax"         # see ROUTERS and the module docstring
    norm_topk: bool = False         # renormalise the chosen experts' weights to sum to one
    n_group: int = 1                # sigmoid router: experts split into groups ...
    topk_group: int = 1             # ... of which this many may be chosen from
    routed_scaling: float = 1.0
    expert_bias: bool = False       # sigmoid router: a learnt per-expert bias used for choosing only
    shared_ffn_dim: int = 0         # width of the always-on shared expert(s); 0: none

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise ValueError(f"router must be one of {ROUTERS}, not {self.router!r}")
        if not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"{self.top_k} experts per token out of {self.n_experts}")
        if self.n_experts % self.n_group or not 1 <= self.topk_group <= self.n_group:
            raise ValueError(f"{self.n_experts} experts do not split into {self.n_group} groups "
                             f"of which {self.topk_group} are kept")


@dataclass(frozen=True)
class BlockConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int                    # dense MLP width (dense models, and a MoE model's dense layers)
    rope_theta: float
    norm_eps: float
    qkv_bias: bool = False
    out_bias: bool = False
    qk_norm: bool = False           # per-head RMSNorm on queries and keys before RoPE (Qwen3)
    rotary_dim: int | None = None   # channels of a head that rotate (None: all)
    tied_embeddings: bool = False
    moe: MoEConfig | None = None
    dense_layers: tuple[int, ...] = field(default=())   # layers of a MoE model that keep a dense MLP

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.n_heads} attention heads do not divide into {self.n_kv_heads} key/value heads")
        rd = self.rotary_dim if self.rotary_dim is not None else self.head_dim
        if rd % 2 or not 0 < rd <= self.head_dim:
            raise ValueError(f"rotary dimension {rd} does not fit a head of {self.head_dim}")

    @property
    def rope_dim(self) -> int:
        return self.rotary_dim if self.rotary_dim is not None else self.head_dim

    def is_moe_layer(self, i: int) -> bool:
        return self.moe is not None and i not in self.dense_layers


class Attention(nn.Module):
    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.rope_dim = cfg.rope_dim
        self.eps = cfg.norm_eps
        width = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
        self.qkv_proj = nn.Linear(cfg.dim, width, bias=cfg.qkv_bias)       # rows: [q heads; k heads; v heads]
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=cfg.out_bias)
        if cfg.qk_norm:
            self.q_norm = nn.Parameter(torch.ones(cfg.head_dim))
            self.k_norm = nn.Parameter(torch.ones(cfg.head_dim))
        else:
            self.q_norm = self.k_norm = None

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        b, t, _ = x.shape
        hq, hkv = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        q, k, v = self.qkv_proj(x).split((hq, hkv, hkv), dim=-1)
        q = q.view(b, t, self.n_heads, self.head_dim)
        k = k.view(b, t, self.n_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q = rms_norm(q.contiguous(), self.q_norm, self.eps)
            k = rms_norm(k.contiguous(), self.k_norm, self.eps)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin), v

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.rope_dim == self.head_dim:
            return apply_rotary(x, cos, sin)
        turned = apply_rotary(x[..., : self.rope_dim].contiguous(), cos, sin)
        return torch.cat([turned, x[..., self.rope_dim:]], dim=-1)

    def out(self, y: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = y.shape
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))

    def attend(self, x, cos, sin, past: KV | None, mask: torch.Tensor | None) -> tuple[torch.Tensor, KV]:
        q, k, v = self.qkv(x, cos, sin)
        keys, values = (k, v) if past is None else (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2))
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                           enable_gqa=self.n_heads != self.n_kv_heads)
        return self.out(y), (k, v)

    def full(self, x, cos, sin) -> tuple[torch.Tensor, KV]:
        """Every row attending to every row (a bidirectional family's exact pass)."""
        return self.attend(x, cos, sin, None, None)

    def cached(self, x, cos, sin, ctx: KV) -> torch.Tensor:
        q, k, v = self.qkv(x, cos, sin)
        return self.out(span_attention(q, ctx[0], ctx[1], k, v))

    def cached_ragged(self, x, cos, sin, shapes: list[tuple[int, int]], contexts: list[KV]) -> tuple[torch.Tensor, KV]:
        """`cached` for several requests' rows back to back (architecture.Attention.cached_ragged's
        contract): each attends to its own context and its own rows; also the rows' keys/values."""
        q, k, v = self.qkv(x, cos, sin)
        return self.out(span_attention_ragged(q, k, v, shapes, contexts)), (k, v)

    def attend_ragged(self, x, cos, sin, shapes: list[tuple[int, int]], pasts: list[KV | None],
                      masks: list[torch.Tensor | None]) -> tuple[torch.Tensor, list[KV]]:
        """x [1, N, dim]: several requests' rows back to back (request r: B_r x T_r rows,
        batch-major), each attending to its own cache `pasts[r]` and its own rows under
        `masks[r]` (as `attend`). -> output [1, N, dim] and each request's keys/values [B_r, Hkv, T_r, D]."""
        q, k, v = self.qkv(x, cos, sin)                                   # [1, heads, N, D]
        parts, kvs, off = [], [], 0
        for (b, t), past, mask in zip(shapes, pasts, masks):
            q_r, k_r, v_r = (a[0, :, off:off + b * t].reshape(a.shape[1], b, t, a.shape[3]).transpose(0, 1)
                             for a in (q, k, v))                          # [B_r, heads, T_r, D]
            keys, values = (k_r, v_r) if past is None else (torch.cat([past[0], k_r], 2), torch.cat([past[1], v_r], 2))
            y = F.scaled_dot_product_attention(q_r, keys, values, attn_mask=mask,
                                               enable_gqa=self.n_heads != self.n_kv_heads)
            parts.append(y.transpose(0, 1).reshape(y.shape[1], b * t, y.shape[3]))
            kvs.append((k_r, v_r))
            off += b * t
        return self.out(torch.cat(parts, 1)[None]), kvs


class DenseMLP(nn.Module):
    """SwiGLU with gate and up in one matmul: down(silu(gate(x)) * up(x))."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(dim, 2 * hidden, bias=False)    # rows: [gate; up]
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class MoEMLP(nn.Module):
    def __init__(self, dim: int, moe: MoEConfig) -> None:
        super().__init__()
        self.moe = moe
        self.router = nn.Parameter(torch.empty(moe.n_experts, dim))
        self.expert_bias = nn.Parameter(torch.zeros(moe.n_experts)) if moe.expert_bias else None
        self.gate_up = nn.Parameter(torch.empty(moe.n_experts, 2 * moe.ffn_dim, dim))   # per expert [gate; up]
        self.down = nn.Parameter(torch.empty(moe.n_experts, dim, moe.ffn_dim))
        self.shared = DenseMLP(dim, moe.shared_ffn_dim) if moe.shared_ffn_dim else None

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [N, D] -> (expert index [N, k], weight [N, k] fp32)."""
        moe = self.moe
        logits = F.linear(x.float(), self.router.float())
        if moe.router == "softmax":
            weight, index = torch.softmax(logits, dim=-1).topk(moe.top_k, dim=-1)
            if moe.norm_topk:
                weight = weight / weight.sum(-1, keepdim=True)
            return index, weight
        scores = torch.sigmoid(logits)
        choose = scores + self.expert_bias.float() if self.expert_bias is not None else scores
        if moe.n_group > 1:
            n = choose.shape[0]
            groups = choose.view(n, moe.n_group, -1)
            group_score = groups.topk(min(2, groups.shape[-1]), dim=-1).values.sum(-1)
            keep = torch.zeros_like(group_score, dtype=torch.bool)
            keep.scatter_(1, group_score.topk(moe.topk_group, dim=-1).indices, True)
            choose = choose.masked_fill(~keep[..., None].expand_as(groups).reshape(n, -1), float("-inf"))
        index = choose.topk(moe.top_k, dim=-1).indices
        weight = scores.gather(1, index)
        if moe.top_k > 1:
            weight = weight / (weight.sum(-1, keepdim=True) + 1e-20)
        return index, weight * moe.routed_scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        index, weight = self.route(flat)
        out = torch.zeros_like(flat)
        for e in index.unique().tolist():           # each selected expert on its own tokens
            rows, slot = (index == e).nonzero(as_tuple=True)
            gate, up = F.linear(flat[rows], self.gate_up[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down[e])
            out.index_add_(0, rows, (y.float() * weight[rows, slot, None]).to(out.dtype))
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.view(shape)


class Layer(nn.Module):
    def __init__(self, cfg: BlockConfig, i: int) -> None:
        super().__init__()
        self.attn_norm = nn.Parameter(torch.ones(cfg.dim))
        self.attn = Attention(cfg)
        self.mlp_norm = nn.Parameter(torch.ones(cfg.dim))
        self.mlp: nn.Module = MoEMLP(cfg.dim, cfg.moe) if cfg.is_moe_layer(i) else DenseMLP(cfg.dim, cfg.ffn_dim)


class BlockLM(DualCachePasses, nn.Module):
    """`forward` / `ragged`: block-wise decoding's passes; `full` / `cached` / `cached_ragged`
    (DualCachePasses): the bidirectional families' passes in a CheckpointSession."""

    def __init__(self, cfg: BlockConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Layer(cfg, i) for i in range(cfg.n_layers))
        self.norm = nn.Parameter(torch.ones(cfg.dim))
        self.lm_head = None if cfg.tied_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.rotary = Rotary(cfg.rope_dim, cfg.rope_theta)

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rotary.cos_sin(positions.to(self.device), self.dtype)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed(ids)

    def _stack(self, h: torch.Tensor, attend) -> torch.Tensor:
        """Pre-norm residual blocks: h + attn(norm(h)), then h + mlp(norm(h)). `attend(i, layer, x)`."""
        eps = self.cfg.norm_eps
        for i, layer in enumerate(self.layers):
            h = h + attend(i, layer, rms_norm(h, layer.attn_norm, eps))
            h = h + layer.mlp(rms_norm(h, layer.mlp_norm, eps))
        return h

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, positions: torch.Tensor, past: list[KV] | None = None,
                mask: torch.Tensor | None = None) -> tuple[torch.Tensor, list[KV]]:
        """ids [B, T] at `positions` [T], attending to `past` (per layer, may be None) and to themselves
        under `mask` ([T, N_past + T] bool, True = attend; None = all). -> hidden [B, T, D] (before the
        final norm), and the rows' own keys/values per layer."""
        cos, sin = self.cos_sin(positions)
        new: list[KV] = []

        def attend(i: int, layer: Layer, x: torch.Tensor) -> torch.Tensor:
            out, kv = layer.attn.attend(x, cos, sin, None if past is None else past[i], mask)
            new.append(kv)
            return out

        return self._stack(self.embed(ids), attend), new

    @torch.no_grad()
    def ragged(self, ids: list[torch.Tensor], starts: list[int], pasts: list[list[KV] | None],
               block_size: int) -> list[tuple[torch.Tensor, list[KV]]]:
        """`forward` for several requests in one pass, under the block-causal mask (blocks of
        `block_size` from position 0): request r's rows ids[r] [B_r, T_r] at positions
        starts[r].., attending to its own cache pasts[r] (per layer, or None) and to themselves.
        Every row of every request goes through the projections and MLPs as one sequence, so
        the weights are read once for all of them (a memory-bound GPU step's cost); attention is
        each request's own. -> per request (hidden [B_r, T_r, D], the rows' keys/values per layer),
        what `forward` gives it alone (up to float rounding)."""
        shapes = [(int(i.shape[0]), int(i.shape[1])) for i in ids]
        masks, cos, sin = [], [], []
        for (b, t), start in zip(shapes, starts):
            positions = torch.arange(start, start + t, device=self.device)
            # Rows inside one block see every key: no mask (the usual step; built and checked on
            # the host, no device sync). Rows over several blocks (a finished block riding along,
            # a prefill) get the block-causal mask.
            one_block = start // block_size == (start + t - 1) // block_size
            masks.append(None if one_block else
                         block_causal_mask(positions, torch.arange(start + t, device=self.device), block_size))
            c, s = self.cos_sin(positions)
            cos.append(c.repeat(b, 1))
            sin.append(s.repeat(b, 1))
        cos, sin = torch.cat(cos), torch.cat(sin)
        flat = torch.cat([i.reshape(-1) for i in ids])[None]
        new: list[list[KV]] = [[] for _ in ids]

        def attend(i: int, layer: Layer, x: torch.Tensor) -> torch.Tensor:
            out, kvs = layer.attn.attend_ragged(x, cos, sin, shapes, [None if p is None else p[i] for p in pasts], masks)
            for r, kv in enumerate(kvs):
                new[r].append(kv)
            return out

        hidden = self._stack(self.embed(flat), attend)[0].split([b * t for b, t in shapes])
        return [(h.view(b, t, -1), kv) for h, (b, t), kv in zip(hidden, shapes, new)]

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(rms_norm(hidden, self.norm, self.cfg.norm_eps), weight)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def block_causal_mask(q_positions: torch.Tensor, k_positions: torch.Tensor, block_size: int) -> torch.Tensor:
    """[Tq, Tk] bool: a query sees every key of its own block and of earlier blocks (blocks counted from
    position 0). This is the attention of SDAR, LLaDA2.0, Fast-dLLM v2 and Stable-DiffCoder at inference."""
    return (k_positions[None, :] // block_size) <= (q_positions[:, None] // block_size)


def random_block_model(cfg: BlockConfig, device: torch.device | str = "cpu", dtype: torch.dtype = torch.bfloat16,
                       seed: int = 0) -> BlockLM:
    """A randomly initialised model of `cfg` straight on `device` (for speed benchmarks: random weights
    time the same as trained ones). Norm weights are 1, everything else N(0, 0.02)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.device("meta"):
        model = BlockLM(cfg)
    state = {}
    for name, p in model.named_parameters():
        if name.endswith("norm") or name.endswith("norm.weight") or name.endswith("_norm"):
            state[name] = torch.ones(p.shape, dtype=dtype, device=device)
        elif name.endswith("expert_bias") or name.endswith(".bias"):
            state[name] = torch.zeros(p.shape, dtype=dtype, device=device)
        else:
            state[name] = torch.randn(p.shape, generator=generator, device=device, dtype=dtype) * 0.02
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()

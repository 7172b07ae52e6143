"""The bidirectional transformer behind every supported open checkpoint, in one file.

LLaDA is a Llama-style stack and the Dream family / Open-dCoder are Qwen2 stacks; with
full (non-causal) attention they compute the same function: pre-RMSNorm blocks, rotary
positions (rotate-half), grouped-query attention and a SwiGLU MLP. They differ only in
tensor names, biases (Qwen2 has q/k/v biases) and whether the LM head is tied, which
`BiConfig` and the family name maps (families.py) carry.

Two ways to run it:
- `full(ids)`: the whole canvas, every token attending to every token (the exact path);
  it can return each layer's keys/values for the dual cache.
- `cached(ids, ...)`: only the active rows (a slot and the row that predicts its first
  token) attending to the cached context keys/values plus themselves (Fast-dLLM's
  approximate dual cache: the context was computed with an earlier state of the span).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dllm_lsp.arch.layers import AttentionProjections, RMSNorm, Rotary, SwiGLU, fuse_blocks
from dllm_lsp.kernels.rmsnorm import add_rms_norm, rms_norm
from dllm_lsp.kernels.span_attention import span_attention, span_attention_ragged

KV = tuple[torch.Tensor, torch.Tensor]   # keys, values [B, Hkv, N, D], rotary already applied


@dataclass(frozen=True)
class BiConfig:
    vocab_size: int             # rows of the embedding (may exceed the tokenizer's size)
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    rope_theta: float
    norm_eps: float
    qkv_bias: bool
    out_bias: bool = False
    mlp_bias: bool = False
    tied_embeddings: bool = False
    embed_scale: float = 1.0    # LLaDA's input_emb_norm multiplies embeddings by sqrt(d_model)
    logit_scale: float = 1.0    # LLaDA's scale_logits divides logits by sqrt(d_model)

    def __post_init__(self) -> None:
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.n_heads} attention heads do not divide into {self.n_kv_heads} key/value heads")


class DualCachePasses:
    """The passes a `CheckpointSession` runs (the exact `full` pass and the dual cache's `cached`
    steps, alone or several requests' in one `cached_ragged`), written once for every model that
    runs in it: BidirectionalLM here and block_model.BlockLM (its bidirectional families,
    LLaDA-MoE and CoDA; their copy had lacked `cached_ragged`, and every shared step and every
    "reuse" request of theirs failed). The model provides `_embed(ids)`, `_stack(h, attend)` (its
    residual blocks, `attend(i, layer, normed)` the attention of block i) and `cos_sin`; each
    layer's `attn` provides `full(x, cos, sin)` -> (out, kv), `cached(x, cos, sin, ctx)` and
    `cached_ragged(x, cos, sin, shapes, contexts)` -> (out, kv)."""

    @torch.no_grad()
    def full(self, ids: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None,
             keep_kv: bool = False) -> tuple[torch.Tensor, list[KV] | None]:
        """ids [B, T] at positions 0..T-1 -> hidden [B, T, D] (before the final norm), and KV if asked."""
        cos, sin = rope if rope is not None else self.cos_sin(torch.arange(ids.shape[1]))
        kvs: list[KV] = []

        def attend(i: int, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
            out, kv = layer.attn.full(x, cos, sin)
            if keep_kv:
                kvs.append(kv)
            return out

        return self._stack(self._embed(ids), attend), (kvs if keep_kv else None)

    @torch.no_grad()
    def cached(self, ids: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], context: list[KV]) -> torch.Tensor:
        """Active rows ids [B, A] (rope at their canvas positions) against cached context -> hidden [B, A, D]."""
        cos, sin = rope
        return self._stack(self._embed(ids), lambda i, layer, x: layer.attn.cached(x, cos, sin, context[i]))

    @torch.no_grad()
    def cached_ragged(self, ids: list[torch.Tensor], ropes: list[tuple[torch.Tensor, torch.Tensor]],
                      contexts: list[list[KV]], keep_kv: bool = False) -> list[tuple[torch.Tensor, list[KV] | None]]:
        """`cached` for several requests in one pass (the step scheduler's shared step).

        ids[r] [B_r, A_r] are request r's rows, ropes[r] their cos/sin [A_r, D] at their canvas
        positions, contexts[r] the keys/values they attend to besides themselves (a cached step's
        stored context, or the kept context a "reuse" first pass extends). Every row of every
        request goes through the projections and MLPs as one sequence, so a step reads the
        weights once for all requests (what a memory-bound GPU step costs); attention is each
        request's own, so each gets the hidden states `cached` gives it alone (up to float
        rounding). Returns per request hidden [B_r, A_r, D] and, with `keep_kv`, each layer's
        keys/values of its rows [B_r, Hkv, A_r, D] (views of the pass's).
        """
        shapes = [(int(i.shape[0]), int(i.shape[1])) for i in ids]
        flat = torch.cat([i.reshape(-1) for i in ids])[None]
        cos = torch.cat([c.repeat(b, 1) for (c, _), (b, _) in zip(ropes, shapes)])
        sin = torch.cat([s.repeat(b, 1) for (_, s), (b, _) in zip(ropes, shapes)])
        layer_kv: list[KV] = []

        def attend(i: int, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
            out, kv = layer.attn.cached_ragged(x, cos, sin, shapes, [ctx[i] for ctx in contexts])
            if keep_kv:
                layer_kv.append(kv)
            return out

        hidden = self._stack(self._embed(flat), attend)
        parts = hidden[0].split([b * a for b, a in shapes])
        out, off = [], 0
        for part, (b, a) in zip(parts, shapes):
            kv = [tuple(t[0, :, off:off + b * a].unflatten(1, (b, a)).transpose(0, 1) for t in pair)
                  for pair in layer_kv] if keep_kv else None
            out.append((part.view(b, a, -1), kv))
            off += b * a
        return out


class Attention(AttentionProjections):
    def __init__(self, cfg: BiConfig) -> None:
        super().__init__(cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.qkv_bias, cfg.out_bias)

    def full(self, x, cos, sin) -> tuple[torch.Tensor, KV]:
        q, k, v = self.qkv(x, cos, sin)
        # No mask: every token attends to every token (these models are bidirectional).
        y = F.scaled_dot_product_attention(q, k, v, enable_gqa=self.n_heads != self.n_kv_heads)
        return self.out(y), (k, v)

    def cached(self, x, cos, sin, ctx: KV) -> torch.Tensor:
        """Rows x against the context keys/values `ctx` plus themselves."""
        q, k, v = self.qkv(x, cos, sin)
        return self.out(span_attention(q, ctx[0], ctx[1], k, v))

    def cached_ragged(self, x, cos, sin, shapes: list[tuple[int, int]], contexts: list[KV]) -> tuple[torch.Tensor, KV]:
        """x [1, T, dim]: the active rows of several requests back to back (request r: B_r x A_r
        rows, batch-major), each attending to its own cached context `contexts[r]` and its own
        rows; also the rows' keys/values [1, Hkv, T, D]."""
        q, k, v = self.qkv(x, cos, sin)                                        # [1, H, T, D]
        return self.out(span_attention_ragged(q, k, v, shapes, contexts)), (k, v)


class Block(nn.Module):
    def __init__(self, cfg: BiConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp: nn.Module = SwiGLU(cfg.dim, cfg.ffn_dim, bias=cfg.mlp_bias)


class BidirectionalLM(DualCachePasses, nn.Module):
    def __init__(self, cfg: BiConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = None if cfg.tied_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.rotary = Rotary(cfg.head_dim, cfg.rope_theta)

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rotary.cos_sin(positions.to(self.device), self.dtype)

    def _embed(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        return h * self.cfg.embed_scale if self.cfg.embed_scale != 1.0 else h

    def _stack(self, h: torch.Tensor, attend) -> torch.Tensor:
        """The pre-norm residual stack, `h + attn(norm(h))` then `h + mlp(norm(h))` per block, with each
        residual add fused into the next norm (one kernel instead of seven on CUDA; same rounding).

        `attend(i, layer, normed)` is the attention of block i: full, cached, or causal with a KV cache.
        """
        layers = list(self.layers)
        x = rms_norm(h, layers[0].attn_norm.weight, layers[0].attn_norm.eps)
        for i, layer in enumerate(layers):
            x, h = add_rms_norm(attend(i, layer, x), h, layer.mlp_norm.weight, layer.mlp_norm.eps)
            out = layer.mlp(x)
            if i + 1 < len(layers):
                nxt = layers[i + 1].attn_norm
                x, h = add_rms_norm(out, h, nxt.weight, nxt.eps)
            else:
                h = h + out
        return h

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(rms_norm(hidden, self.norm.weight, self.norm.eps), weight)
        return logits * self.cfg.logit_scale if self.cfg.logit_scale != 1.0 else logits

    def fuse_projections(self) -> "BidirectionalLM":
        """After loading: q/k/v and gate/up as single matmuls (inference layout; same results)."""
        fuse_blocks(self.layers)
        return self

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

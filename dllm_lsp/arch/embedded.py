"""The embedded default model: a small transformer with the "causal context, bidirectional
span" attention layout (DESIGN.md), in one readable file.

Context tokens attend causally to earlier context tokens only (slots are invisible to them),
so their keys/values never depend on the span: `prefill` computes them once per request,
and an append-only prefix can be reused across keystrokes. Span tokens attend to every
context token and every span token, so each denoising step (`span_logits`) costs only the
span rows. `attention_layout = "bidirectional"` trains and runs the comparison variant in
which every token sees every token (no exact cache).
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from dllm_lsp.kernels.rmsnorm import add_rms_norm
from dllm_lsp.kernels.span_attention import span_attention, span_attention_ragged

from .layers import RMSNorm, Rotary, SwiGLU, apply_rotary

ARCHITECTURE = "DllmLspEmbedded"
MODEL_TYPE = "dllm-lsp-embedded"
LAYOUTS = ("causal_context", "bidirectional")


@dataclass
class EmbeddedConfig:
    vocab_size: int = 16384
    dim: int = 512
    n_layers: int = 8
    n_heads: int = 8
    n_kv_heads: int = 8
    ffn_dim: int = 1408
    max_positions: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    attention_layout: str = "causal_context"
    mask_token_id: int = 0
    pad_token_id: int = 1
    eos_token_id: int | None = None

    def __post_init__(self) -> None:
        if self.attention_layout not in LAYOUTS:
            raise ValueError(f"attention_layout must be one of {LAYOUTS}, not {self.attention_layout!r}")
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError("dim must divide by n_heads, and n_heads by n_kv_heads")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def to_json(self) -> dict:
        return {"architectures": [ARCHITECTURE], "model_type": MODEL_TYPE, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict) -> "EmbeddedConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def load(cls, folder: Path) -> "EmbeddedConfig":
        return cls.from_json(json.loads((folder / "config.json").read_text()))


KV = tuple[torch.Tensor, torch.Tensor]   # keys, values: [B, Hkv, T, D]


class Attention(nn.Module):
    def __init__(self, cfg: EmbeddedConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v

    def out(self, y: torch.Tensor) -> torch.Tensor:
        b, _, t, _ = y.shape
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))

    def masked(self, x, cos, sin, mask: torch.Tensor | None, past: KV | None = None):
        """Attention under an explicit boolean mask [B or 1, 1, Tq, Tk]; returns (out, new kv)."""
        q, k, v = self.project(x, cos, sin)
        keys, values = (torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)) if past else (k, v)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=self.n_heads != self.n_kv_heads)
        return self.out(y), (k, v)

    def flex(self, x, cos, sin, block_mask):
        """Attention under a flex-attention block mask (training on CUDA: fused, blocks skipped)."""
        q, k, v = self.project(x, cos, sin)
        y = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=self.n_heads != self.n_kv_heads)
        return self.out(y)

    def span(self, x, cos, sin, ctx: KV):
        """Span rows attend to all cached context and all span rows: no mask."""
        q, k, v = self.project(x, cos, sin)
        return self.out(span_attention(q, ctx[0], ctx[1], k, v))


class Block(nn.Module):
    def __init__(self, cfg: EmbeddedConfig) -> None:
        super().__init__()
        self.input_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.post_attn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = SwiGLU(cfg.dim, cfg.ffn_dim)


def layout_mask(is_span: torch.Tensor, layout: str) -> torch.Tensor | None:
    """is_span [B, T] -> boolean attention mask [B, 1, T, T] (True = may attend)."""
    if layout == "bidirectional":
        return None
    t = is_span.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=is_span.device).tril()
    q_span = is_span[:, :, None]
    k_span = is_span[:, None, :]
    context_pair = ~q_span & ~k_span & causal
    span_query = q_span.expand(-1, -1, t)
    return (context_pair | span_query)[:, None]


def layout_block_mask(is_span: torch.Tensor, layout: str):
    """The same layout as `layout_mask`, as a flex-attention BlockMask (None when bidirectional).

    SDPA with an explicit boolean mask cannot use its flash kernel; flex attention compiles the
    rule itself and skips key blocks no query of a block may see (the causal context's upper
    triangle), so training on a GPU gets a fused kernel for this layout.
    """
    if layout == "bidirectional":
        return None
    b, t = is_span.shape

    def may_attend(batch, head, q, kv):
        return is_span[batch, q] | (~is_span[batch, kv] & (kv <= q))

    return create_block_mask(may_attend, b, None, t, t, device=is_span.device)


class EmbeddedModel(nn.Module):
    def __init__(self, cfg: EmbeddedConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.rotary = Rotary(cfg.head_dim, cfg.rope_theta)
        # "mask": SDPA with an explicit mask (any device); "flex": flex attention, for a
        # torch.compile'd training run on CUDA. Inference never takes this path (prefill/span_logits).
        self.training_attention = "mask"
        self.init_weights()

    def init_weights(self) -> None:
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # Residual-branch outputs scaled down with depth (GPT-2 style) keeps early training stable.
                scale = 1 / math.sqrt(2 * self.cfg.n_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 1
                nn.init.normal_(p, mean=0.0, std=std * scale)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """Tied embeddings: the LM head is the embedding matrix."""
        return F.linear(self.norm(h), self.embed.weight)

    def forward(self, ids: torch.Tensor, is_span: torch.Tensor, positions: torch.Tensor | None = None,
                return_hidden: bool = False) -> torch.Tensor:
        """The whole canvas at once (training, and the uncached reference): logits [B, T, V]."""
        b, t = ids.shape
        if positions is None:
            positions = torch.arange(t, device=ids.device)
        h = self.embed(ids)
        cos, sin = self.rotary.cos_sin(positions, h.dtype)
        flex = self.training_attention == "flex"
        block_mask = layout_block_mask(is_span, self.cfg.attention_layout) if flex else None
        mask = None if flex else layout_mask(is_span, self.cfg.attention_layout)
        for layer in self.layers:
            x = layer.input_norm(h)
            h = h + (layer.attn.flex(x, cos, sin, block_mask) if flex else layer.attn.masked(x, cos, sin, mask)[0])
            h = h + layer.mlp(layer.post_attn_norm(h))
        return h if return_hidden else self.head(h)

    @torch.no_grad()
    def prefill(self, ids: torch.Tensor, positions: torch.Tensor, past: list[KV] | None = None) -> list[KV]:
        """Context tokens ids [1, M] at canvas `positions` [M], causal over `past` + themselves.

        Returns each layer's keys/values for past + these tokens.
        """
        n_past = past[0][0].shape[2] if past else 0
        m = ids.shape[1]
        h = self.embed(ids)
        cos, sin = self.rotary.cos_sin(positions, h.dtype)
        mask = torch.ones(m, n_past + m, dtype=torch.bool, device=ids.device).tril(diagonal=n_past)[None, None]
        caches: list[KV] = []
        for i, layer in enumerate(self.layers):
            layer_past = past[i] if past else None
            a, (k, v) = layer.attn.masked(layer.input_norm(h), cos, sin, mask, layer_past)
            h = h + a
            h = h + layer.mlp(layer.post_attn_norm(h))
            if layer_past is not None:
                k, v = torch.cat([layer_past[0], k], 2), torch.cat([layer_past[1], v], 2)
            caches.append((k, v))
        return caches

    @torch.no_grad()
    def span_logits(self, span_ids: torch.Tensor, span_positions: torch.Tensor, context: list[KV],
                    rows: torch.Tensor | None = None) -> torch.Tensor:
        """One denoising step: span_ids [B, S] at `span_positions` [S] against cached context.

        Logits [B, S, V], or [R, V] for the R rows `rows` ([B, S] bool) selects: every span row
        goes through the layers (each attends to all of them), but only the rows whose token is
        still undecided need the LM head, the largest matmul of a step for a small model.
        """
        h = self.embed(span_ids)
        cos, sin = self.rotary.cos_sin(span_positions, h.dtype)
        # Same arithmetic as forward(), with each residual add fused into the norm that follows it.
        norms_after = [layer.input_norm for layer in self.layers[1:]] + [self.norm]
        x = self.layers[0].input_norm(h)
        for layer, ctx, next_norm in zip(self.layers, context, norms_after):
            x, h = add_rms_norm(layer.attn.span(x, cos, sin, ctx), h, layer.post_attn_norm.weight, layer.post_attn_norm.eps)
            x, h = add_rms_norm(layer.mlp(x), h, next_norm.weight, next_norm.eps)
        return F.linear(x if rows is None else x[rows], self.embed.weight)

    @torch.no_grad()
    def span_logits_ragged(self, spans: list[torch.Tensor], positions: list[torch.Tensor],
                           contexts: list[list[KV]],
                           rows: list[torch.Tensor | None] | None = None) -> list[torch.Tensor]:
        """One denoising step of several requests at once (the step scheduler's batched forward).

        spans[r] [B_r, S_r] at positions[r] [S_r] against contexts[r] (that request's cached keys
        and values). Every row of every request goes through the projections, the MLPs and the LM
        head together, as one sequence (the weights are read once for all of them); attention is
        each request's own, over its own context and span, so nothing is padded or copied and
        each request gets the logits `span_logits` gives it alone (up to float rounding).
        `rows[r]` ([B_r, S_r] bool, or None for all) picks the rows of request r that need the
        LM head; that request's logits are then [R_r, V].
        """
        shapes = [tuple(s.shape) for s in spans]
        h = self.embed(torch.cat([s.reshape(-1) for s in spans]))[None]            # [1, T, dim]
        flat_pos = torch.cat([p.repeat(b) for p, (b, _) in zip(positions, shapes)])
        cos, sin = self.rotary.cos_sin(flat_pos, h.dtype)
        for i, layer in enumerate(self.layers):
            q, k, v = layer.attn.project(layer.input_norm(h), cos, sin)             # [1, H, T, D]
            h = h + layer.attn.out(span_attention_ragged(q, k, v, shapes, [ctx[i] for ctx in contexts]))
            h = h + layer.mlp(layer.post_attn_norm(h))
        if rows is None:
            rows = [None] * len(spans)
        # The head only for the wanted rows: a flat selection over every request's rows.
        wanted = torch.cat([torch.ones(b * n, dtype=torch.bool, device=h.device) if r is None else r.reshape(-1)
                            for (b, n), r in zip(shapes, rows)])
        logits = self.head(h[0, wanted])
        out, off = [], 0
        for (b, n), r in zip(shapes, rows):
            count = b * n if r is None else int(r.sum())
            part = logits[off:off + count]
            out.append(part.view(b, n, -1) if r is None else part)
            off += count
        return out

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

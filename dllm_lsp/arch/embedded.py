"""The embedded default model: a small transformer with the "causal context, bidirectional
span" attention layout (docs/models.md), in one readable file.

Context tokens attend causally to earlier context tokens only (slots are invisible to them),
so their keys/values never depend on the span: they are computed once per request (in its
first step's pass, `step`), and an append-only prefix can be reused across keystrokes. Span tokens attend to every
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
from dllm_lsp.model_folder import MAX_LAYERS, MAX_SIZE

from .layers import AttentionProjections, RMSNorm, Rotary, SwiGLU, fuse_blocks

ARCHITECTURE = "DllmLspEmbedded"
MODEL_TYPE = "dllm-lsp-embedded"
LAYOUTS = ("causal_context", "bidirectional")


MIN_POSITIONS = 64   # a line slot (32 tokens) and some context: below it no completion fits


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "max_positions"):
            value, high = getattr(self, name), MAX_LAYERS if name == "n_layers" else MAX_SIZE
            if not _is_int(value) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
            # Before anything is built: 10^9 layers hung a load building them, and a 10^9 width
            # took 4 GB for its rotary table.
            if value > high:
                raise ValueError(f"{name} is {value}: it must be within 1..{high}")
        if self.max_positions < MIN_POSITIONS:
            raise ValueError(f"max_positions {self.max_positions} leaves no room for a completion "
                             f"(at least {MIN_POSITIONS})")
        for name in ("rope_theta", "norm_eps"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"{name} must be a positive number, not {value!r}")
        for name in ("mask_token_id", "pad_token_id", "eos_token_id"):
            value = getattr(self, name)
            if not (value is None and name == "eos_token_id") and not (_is_int(value) and 0 <= value < self.vocab_size):
                raise ValueError(f"{name} must be a token id below vocab_size {self.vocab_size}, not {value!r}")
        if self.mask_token_id == self.pad_token_id:
            raise ValueError(f"mask_token_id and pad_token_id are both {self.mask_token_id}: a pad would read as a mask")
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


@dataclass
class SpanRows:
    """One request's part of a step (`EmbeddedModel.step`): the span rows of its candidates and,
    on its first step, the context tokens its cache lacks. Those ride in the same pass, causal
    over the cached context and each other (their keys/values never depend on the span), so a
    request's context costs no pass of its own, and a new request joins a shared step at once."""

    span: torch.Tensor                          # [B, S] token ids in the slots
    positions: torch.Tensor                     # [S] their canvas positions
    context: list[KV]                           # per layer, cached keys/values [1, Hkv, N, D] (N may be 0)
    new_ids: torch.Tensor | None = None         # [M] context tokens to compute in this pass
    new_positions: torch.Tensor | None = None   # [M] their canvas positions (after the cached ones)
    rows: torch.Tensor | None = None            # [B, S] bool: rows that need the LM head (None: all)

    @property
    def n_new(self) -> int:
        return 0 if self.new_ids is None else int(self.new_ids.numel())


def extend_contexts(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, counts: list[int], contexts: list[KV],
                    masks: list[torch.Tensor | None] | None = None) -> tuple[torch.Tensor | None, list[KV]]:
    """New context rows of several requests, back to back: q [1, H, M, D], k/v [1, Hkv, M, D],
    request r owning `counts[r]` of them after its cached context `contexts[r]` ([1, Hkv, N_r, D]).
    Returns each request's context with its new keys/values appended and, given `masks`
    (`causal_masks`), the new rows' attention output [1, H, M, D]: causal over the cached context
    and the new rows up to itself (the context half of the layout; a context row never sees a slot)."""
    parts, extended, off = [], [], 0
    for r, (m, (k_ctx, v_ctx)) in enumerate(zip(counts, contexts)):
        if m:
            k_ctx, v_ctx = torch.cat([k_ctx, k[:, :, off:off + m]], 2), torch.cat([v_ctx, v[:, :, off:off + m]], 2)
            if masks is not None:
                parts.append(F.scaled_dot_product_attention(q[:, :, off:off + m], k_ctx, v_ctx, attn_mask=masks[r],
                                                            enable_gqa=q.shape[1] != k.shape[1]))
            off += m
        extended.append((k_ctx, v_ctx))
    return (torch.cat(parts, 2) if parts else None), extended


def causal_masks(counts: list[int], cached: list[int], device: torch.device) -> list[torch.Tensor | None]:
    """Per request, [M_r, N_r + M_r] bool: new context row i sees the N_r cached rows and new rows <= i
    (None where a request has no new rows). Built once per step: every layer uses the same."""
    return [torch.ones(m, n + m, dtype=torch.bool, device=device).tril(diagonal=n) if m else None
            for m, n in zip(counts, cached)]


class Attention(AttentionProjections):
    def __init__(self, cfg: EmbeddedConfig) -> None:
        super().__init__(cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)

    def masked(self, x, cos, sin, mask: torch.Tensor | None):
        """Attention under an explicit boolean mask [B or 1, 1, T, T] (None: every pair)."""
        q, k, v = self.qkv(x, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=self.n_heads != self.n_kv_heads)
        return self.out(y)

    def flex(self, x, cos, sin, block_mask):
        """Attention under a flex-attention block mask (training on CUDA: fused, blocks skipped)."""
        q, k, v = self.qkv(x, cos, sin)
        y = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=self.n_heads != self.n_kv_heads)
        return self.out(y)

    def span(self, x, cos, sin, ctx: KV):
        """Span rows attend to all cached context and all span rows: no mask."""
        q, k, v = self.qkv(x, cos, sin)
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
        # torch.compile'd training run on CUDA. Inference never takes this path (step/span_logits).
        self.training_attention = "mask"
        self.init_weights()

    def init_weights(self) -> None:
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # Residual-branch outputs scaled down with depth (GPT-2 style) keeps early training stable.
                scale = 1 / math.sqrt(2 * self.cfg.n_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 1
                nn.init.normal_(p, mean=0.0, std=std * scale)

    def fuse_projections(self) -> "EmbeddedModel":
        """After loading, for inference: q/k/v and gate/up as single matmuls (the open checkpoints'
        serving layout too). Same results; three launches fewer per layer and step, which count on
        a GPU, where a small model's step is bound by its launches. Training keeps the separate
        projections (the weights are saved that way)."""
        fuse_blocks(self.layers)
        return self

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
            h = h + (layer.attn.flex(x, cos, sin, block_mask) if flex else layer.attn.masked(x, cos, sin, mask))
            h = h + layer.mlp(layer.post_attn_norm(h))
        return h if return_hidden else self.head(h)

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
    def step(self, requests: list[SpanRows]) -> list[tuple[torch.Tensor, list[KV]]]:
        """One denoising step of one or several requests in one forward pass (the step
        scheduler's shared step, and every request's first step).

        Every row of every request goes through the projections, the MLPs and the LM head
        together, as one sequence: first the context rows the requests' caches lack, then every
        request's span rows, so the weights are read once for all of them. Attention is each
        request's own: its new context rows causal over its context (`extend_contexts`), its
        span rows over its whole context and its own span (`span_attention_ragged`). Nothing is
        padded or copied between requests, and each request gets the logits the whole-canvas
        `forward` gives it alone (up to float rounding). Returns, per request, its logits
        ([B, S, V], or [R, V] for its `rows`) and its context keys/values after the step (the
        cached ones, extended by its new rows).
        """
        counts = [r.n_new for r in requests]
        shapes = [tuple(r.span.shape) for r in requests]
        new = sum(counts)
        tokens = [r.new_ids for r in requests if r.n_new] + [r.span.reshape(-1) for r in requests]
        positions = ([r.new_positions for r in requests if r.n_new]
                     + [r.positions.repeat(b) for r, (b, _) in zip(requests, shapes)])
        h = self.embed(torch.cat(tokens))[None]                                      # [1, T, dim]
        cos, sin = self.rotary.cos_sin(torch.cat(positions), h.dtype)
        contexts: list[list[KV]] = [[] for _ in requests]
        masks = causal_masks(counts, [r.context[0][0].shape[2] for r in requests], h.device) if new else None
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            q, k, v = layer.attn.qkv(layer.input_norm(h), cos, sin)             # [1, H, T, D]
            # Past their last keys/values the context rows are never read: the last layer's
            # attention and MLP, and the head, run on span rows only.
            y_ctx, kv = extend_contexts(q[:, :, :new], k[:, :, :new], v[:, :, :new], counts,
                                        [r.context[i] for r in requests], masks if i < last else None)
            y = span_attention_ragged(q[:, :, new:], k[:, :, new:], v[:, :, new:], shapes, kv)
            if y_ctx is not None:
                y = torch.cat([y_ctx, y], 2)
            elif new:
                h = h[:, new:]
            for context, layer_kv in zip(contexts, kv):
                context.append(layer_kv)
            h = h + layer.attn.out(y)
            h = h + layer.mlp(layer.post_attn_norm(h))
        # The head only for the wanted rows: a flat selection over every request's span rows.
        wanted = torch.cat([torch.ones(b * s, dtype=torch.bool, device=h.device) if r.rows is None
                            else r.rows.reshape(-1) for r, (b, s) in zip(requests, shapes)])
        logits = self.head(h[0, wanted])
        out, off = [], 0
        for r, (b, s), context in zip(requests, shapes, contexts):
            count = b * s if r.rows is None else int(r.rows.sum())
            part = logits[off:off + count]
            out.append((part.view(b, s, part.shape[-1]) if r.rows is None else part, context))
            off += count
        return out

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

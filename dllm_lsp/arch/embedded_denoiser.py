"""The embedded model as a `Denoiser`: exact context caching, reused across keystrokes.

Context keys/values are kept for the last few canvases (PREFIX_CACHE_ENTRIES, least recently
used out): with several documents (or clients) typing at once each keeps its own prefix, and a
new request reuses the entry sharing its longest prefix. Several requests' denoising steps run
as one padded forward pass (`batch_logits`, driven by the engine's step scheduler).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from dllm_lsp.engine.denoiser import Canvas, Denoiser, SpecialTokens
from dllm_lsp.engine.types import CacheSettings

from .embedded import KV, EmbeddedConfig, EmbeddedModel
from .weight_storage import load_weights


PREFIX_CACHE_ENTRIES = 8


@dataclass(eq=False)   # compared by identity: its fields are tensors
class PrefixCache:
    """Keys/values of the last request's context, keyed by (token, position) pairs."""

    ids: torch.Tensor         # [M] context token ids, in canvas order
    positions: torch.Tensor   # [M] their canvas positions
    kv: list[KV]

    def reusable_length(self, ids: torch.Tensor, positions: torch.Tensor) -> int:
        """How many leading context tokens of a new canvas match this cache exactly."""
        n = min(self.ids.numel(), ids.numel())
        if n == 0:
            return 0
        same = (self.ids[:n] == ids[:n]) & (self.positions[:n] == positions[:n])
        mismatch = (~same).nonzero()
        return int(mismatch[0, 0]) if mismatch.numel() else n


class EmbeddedSession:
    def __init__(self, model: EmbeddedModel, canvas: Canvas, batch: int, context: list[KV] | None) -> None:
        self.model = model
        self.span_positions = canvas.span_positions().to(model.embed.weight.device)
        self.batch = batch
        self.context = context

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        if self.context is None:   # bidirectional layout: every step sees the whole canvas
            is_span = torch.zeros_like(ids, dtype=torch.bool)
            is_span[:, self.span_positions] = True
            return self.model(ids, is_span)[:, self.span_positions]
        return self.model.span_logits(ids[:, self.span_positions], self.span_positions, self.context)


class EmbeddedDenoiser(Denoiser):
    family = "embedded"

    def __init__(self, model: EmbeddedModel, tokenizer: Tokenizer, name: str) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        cfg = model.cfg
        self.special = SpecialTokens(mask_id=cfg.mask_token_id, pad_id=cfg.pad_token_id, eos_id=cfg.eos_token_id)
        self.device = model.embed.weight.device
        self.max_context = cfg.max_positions
        self._prefix_caches: list[PrefixCache] = []   # most recently used last
        self.prefix_cache_entries = PREFIX_CACHE_ENTRIES   # 0: recompute every context (a baseline)
        self._lock = threading.Lock()
        self._padded: tuple[tuple[int, ...], list[KV], torch.Tensor] | None = None
        self.last_reused_tokens = 0

    @classmethod
    def load(cls, folder: Path, device: torch.device, dtype: torch.dtype = torch.float32) -> "EmbeddedDenoiser":
        cfg = EmbeddedConfig.load(folder)
        with torch.device("meta"):
            model = EmbeddedModel(cfg)
        state = load_weights(folder / "model.safetensors", device, dtype)   # bf16, fp32 or int8 on disk
        model.load_state_dict(state, strict=True, assign=True)
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        return cls(model.to(device), tokenizer, folder.name)

    def session(self, canvas: Canvas, batch: int, cache: CacheSettings = CacheSettings()) -> EmbeddedSession:
        # `cache` is for approximate caches: this model's context cache is exact, always on.
        if self.model.cfg.attention_layout == "bidirectional":
            return EmbeddedSession(self.model, canvas, batch, None)
        return EmbeddedSession(self.model, canvas, batch, self._context_kv(canvas))

    def _context_kv(self, canvas: Canvas) -> list[KV]:
        ctx_mask = canvas.context_mask()
        ids = canvas.ids[ctx_mask].to(self.device)
        positions = torch.arange(canvas.length, device=self.device)[ctx_mask.to(self.device)]
        with self._lock:
            cache, reuse = None, 0
            for entry in self._prefix_caches:
                length = entry.reusable_length(ids, positions)
                if length > reuse or cache is None:
                    cache, reuse = entry, length
            if reuse == ids.numel() and cache is not None and cache.ids.numel() == reuse:
                kv = cache.kv
            else:
                past = [(k[:, :, :reuse], v[:, :, :reuse]) for k, v in cache.kv] if reuse else None
                if reuse < ids.numel():
                    kv = self.model.prefill(ids[None, reuse:], positions[reuse:], past)
                else:
                    kv = past
                if kv is None:   # no context at all (an empty file)
                    kv = self._empty_kv()
            if cache is not None and reuse > 0 and (reuse == cache.ids.numel() or reuse == ids.numel()):
                # extended (typing) or the same: replace it, don't add another
                self._prefix_caches = [c for c in self._prefix_caches if c is not cache]
            self._prefix_caches.append(PrefixCache(ids, positions, kv))
            keep = self.prefix_cache_entries
            self._prefix_caches = self._prefix_caches[-keep:] if keep > 0 else []
            self.last_reused_tokens = reuse
        return kv

    def batch_logits(self, sessions: list[EmbeddedSession], ids: list[torch.Tensor]) -> list[torch.Tensor] | None:
        """Every session's span logits from one forward pass: spans and contexts right-padded to the
        longest, padding masked out. The padded contexts are built once per set of sessions (a
        request joining or leaving rebuilds them), not once per step."""
        if len(sessions) < 2 or any(s.context is None for s in sessions):
            return None   # one request, or the bidirectional layout (no context cache): nothing to batch
        rows = [(s, i[b]) for s, i in zip(sessions, ids) for b in range(i.shape[0])]
        key = tuple(id(s) for s, _ in rows)
        if self._padded is None or self._padded[0] != key:
            self._padded = (key, *self._pad_contexts([s for s, _ in rows]))
        _, context, ctx_valid = self._padded
        width = max(s.span_positions.numel() for s, _ in rows)
        span_ids = torch.full((len(rows), width), self.special.mask_id, dtype=torch.long, device=self.device)
        positions = torch.zeros(len(rows), width, dtype=torch.long, device=self.device)
        span_valid = torch.zeros(len(rows), width, dtype=torch.bool, device=self.device)
        for r, (s, row_ids) in enumerate(rows):
            n = s.span_positions.numel()
            span_ids[r, :n] = row_ids[s.span_positions]
            positions[r, :n] = s.span_positions
            span_valid[r, :n] = True
        logits = self.model.span_logits_padded(span_ids, positions, context, torch.cat([ctx_valid, span_valid], 1))
        out, r = [], 0
        for s, i in zip(sessions, ids):
            out.append(logits[r:r + i.shape[0], :s.span_positions.numel()])
            r += i.shape[0]
        return out

    def _pad_contexts(self, sessions: list[EmbeddedSession]) -> tuple[list[KV], torch.Tensor]:
        longest = max(s.context[0][0].shape[2] for s in sessions)
        valid = torch.zeros(len(sessions), longest, dtype=torch.bool, device=self.device)
        for r, s in enumerate(sessions):
            valid[r, :s.context[0][0].shape[2]] = True
        padded: list[KV] = []
        for layer in range(self.model.cfg.n_layers):
            k0 = sessions[0].context[layer][0]
            keys = k0.new_zeros(len(sessions), k0.shape[1], longest, k0.shape[3])
            values = torch.zeros_like(keys)
            for r, s in enumerate(sessions):
                k, v = s.context[layer]
                keys[r, :, :k.shape[2]], values[r, :, :v.shape[2]] = k[0], v[0]
            padded.append((keys, values))
        return padded, valid

    def _empty_kv(self) -> list[KV]:
        cfg = self.model.cfg
        empty = torch.zeros(1, cfg.n_kv_heads, 0, cfg.head_dim, device=self.device, dtype=self.model.embed.weight.dtype)
        return [(empty, empty) for _ in range(cfg.n_layers)]

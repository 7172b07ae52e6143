"""The embedded model as a `Denoiser`: exact context caching, reused across keystrokes.

Context keys/values are kept for the last few canvases (PREFIX_CACHE_ENTRIES, least recently
used out): with several documents (or clients) typing at once each keeps its own prefix, and a
new request reuses the entry sharing its longest prefix. Several requests' denoising steps run
as one forward pass (`batch_logits`, driven by the engine's step scheduler).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from dllm_lsp.engine.denoiser import Canvas, Denoiser, SpecialTokens, matching_run
from dllm_lsp.engine.types import CacheSettings
from dllm_lsp.model_folder import check_weights_match

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
        return matching_run(self.ids, self.positions, ids, positions)


class EmbeddedSession:
    def __init__(self, model: EmbeddedModel, canvas: Canvas, batch: int, context: list[KV] | None) -> None:
        self.model = model
        self.span_positions = canvas.span_positions().to(model.embed.weight.device)
        self.batch = batch
        self.context = context

    def logits(self, ids: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        if self.context is None:   # bidirectional layout: every step sees the whole canvas
            is_span = torch.zeros_like(ids, dtype=torch.bool)
            is_span[:, self.span_positions] = True
            hidden = self.model(ids, is_span, return_hidden=True)[:, self.span_positions]
            return self.model.head(hidden if rows is None else hidden[rows])
        return self.model.span_logits(ids[:, self.span_positions], self.span_positions, self.context, rows)


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
        self.last_reused_tokens = 0

    @classmethod
    def load(cls, folder: Path, device: torch.device, dtype: torch.dtype = torch.float32) -> "EmbeddedDenoiser":
        cfg = EmbeddedConfig.load(folder)
        with torch.device("meta"):
            model = EmbeddedModel(cfg)
        state = load_weights(folder / "model.safetensors", device, dtype)   # bf16, fp32 or int8 on disk
        check_weights_match({name: tuple(t.shape) for name, t in model.state_dict().items()}, state, folder)
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

    def batch_logits(self, sessions: list[EmbeddedSession], ids: list[torch.Tensor],
                     rows: list[torch.Tensor | None] | None = None) -> list[torch.Tensor] | None:
        """Every session's span logits from one forward pass (`EmbeddedModel.span_logits_ragged`)."""
        if len(sessions) < 2 or any(s.context is None for s in sessions):
            return None   # one request, or the bidirectional layout (no context cache): nothing to batch
        spans = [i[:, s.span_positions] for s, i in zip(sessions, ids)]
        return self.model.span_logits_ragged(spans, [s.span_positions for s in sessions],
                                             [s.context for s in sessions], rows)

    def _empty_kv(self) -> list[KV]:
        cfg = self.model.cfg
        empty = torch.zeros(1, cfg.n_kv_heads, 0, cfg.head_dim, device=self.device, dtype=self.model.embed.weight.dtype)
        return [(empty, empty) for _ in range(cfg.n_layers)]

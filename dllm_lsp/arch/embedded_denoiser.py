"""The embedded model as a `Denoiser`: exact context caching, reused across keystrokes.

Context keys/values are kept for the last few canvases (PREFIX_CACHE_ENTRIES, least recently
used out): with several documents (or clients) typing at once each keeps its own prefix, and a
new request reuses the entry sharing its longest prefix. Opening a session only looks its
context up: the tokens no entry holds are computed in the request's first step, in the same
pass as its span rows (a request costs no prefill pass of its own, and joins a shared step as it
arrives). Several requests' steps run as one forward pass (`batch_logits`, driven by the
engine's step scheduler), first steps and later ones alike.

With `cuda_graphs` on, a request running alone replays its steady steps (the span against a
context that no longer changes) from a CUDA graph captured on the first of them
(engine/cuda_graph.py): one launch instead of over a hundred per step.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Tokenizer

from dllm_lsp.engine.cuda_graph import GraphedCall, capture_or_none
from dllm_lsp.engine.denoiser import Canvas, Denoiser, SpecialTokens, matching_run, plain_text_tokenizer
from dllm_lsp.engine.types import CacheSettings
from dllm_lsp.model_folder import check_finite, check_weights_match

from .embedded import KV, EmbeddedConfig, EmbeddedModel, SpanRows
from .weight_storage import load_weights, weight_shapes


PREFIX_CACHE_ENTRIES = 8
# A new context that reuses an entry's prefix up to this many tokens was computed at the same
# spot (a keystroke retokenizes the last token or two before the cursor): it replaces the entry.
SAME_SPOT_TOKENS = 4


@dataclass(eq=False)   # compared by identity: its fields are tensors
class PrefixCache:
    """Keys/values of a request's context, keyed by (token, position) pairs. The keys stay on the
    CPU, where the canvas is built: matching them costs no device round trip."""

    ids: torch.Tensor         # [M] context token ids, in canvas order (CPU)
    positions: torch.Tensor   # [M] their canvas positions (CPU)
    kv: list[KV]

    def __post_init__(self) -> None:
        self.head = _head(self.ids, self.positions)
        # Context tokens before the first slot (the cursor's): where the positions first jump.
        jumps = ((self.positions[1:] - self.positions[:-1]) > 1).nonzero()
        self.prefix_length = int(jumps[0, 0]) + 1 if jumps.numel() else int(self.ids.numel())

    def holds(self, ids: torch.Tensor, positions: torch.Tensor) -> bool:
        """Whether this entry is exactly the context `ids` at `positions`."""
        return ids.numel() == self.ids.numel() and \
            self.reusable_length(ids, positions, _head(ids, positions)) == ids.numel()

    def reusable_length(self, ids: torch.Tensor, positions: torch.Tensor, head: tuple[int, int] | None) -> int:
        """How many leading context tokens of a new canvas (whose first token and position are
        `head`) match this cache exactly."""
        if head is None or head != self.head:      # another document, or another cut: nothing
            return 0
        return matching_run(self.ids, self.positions, ids, positions)


def _head(ids: torch.Tensor, positions: torch.Tensor) -> tuple[int, int] | None:
    return (int(ids[0]), int(positions[0])) if ids.numel() else None


@dataclass(eq=False)
class ContextLookup:
    """A canvas's context against the prefix caches: what is cached, what its first pass computes."""

    ids: torch.Tensor                 # [M] the canvas's context token ids (CPU)
    positions: torch.Tensor           # [M] their canvas positions (CPU)
    source: PrefixCache | None        # the cache entry it reuses (None: nothing reused)
    reused: int                       # leading context tokens that entry serves
    past: list[KV]                    # their keys/values (empty tensors when none)

    @property
    def missing(self) -> int:
        return int(self.ids.numel()) - self.reused


class EmbeddedSession:
    """One request's run on the embedded model. Its context is looked up when the session opens;
    what the caches lack is computed in its first step's pass, with the span rows (`SpanRows`),
    and only then joins the prefix caches."""

    def __init__(self, denoiser: "EmbeddedDenoiser", canvas: Canvas, batch: int,
                 lookup: ContextLookup | None) -> None:
        self.denoiser = denoiser
        self.model = denoiser.model
        self.span_positions = canvas.span_positions().to(denoiser.device)
        self.batch = batch
        self.lookup = lookup            # None: the bidirectional layout (no context cache)
        self.context: list[KV] | None = None
        self.graphed: GraphedCall | None = None     # its steady steps' graph, once captured
        if lookup is not None and not lookup.missing:
            self.keep_context(lookup.past)     # all of it cached (or no context at all)
        elif lookup is not None and not denoiser.context_in_first_step:
            self._context_alone()

    @property
    def pending_rows(self) -> int:
        """Context rows the next pass computes besides the span rows (only the first pass has any)."""
        return self.lookup.missing if self.lookup is not None and self.context is None else 0

    def span_rows(self, ids: torch.Tensor, rows: torch.Tensor | None) -> SpanRows:
        """This session's part of a step over the canvas `ids` [B, T]."""
        span = ids[:, self.span_positions]
        if self.context is not None:
            return SpanRows(span, self.span_positions, self.context, rows=rows)
        return SpanRows(span, self.span_positions, self.lookup.past, *self._uncached(), rows)

    def _uncached(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The context tokens no cache holds, and their positions, on the model's device."""
        lookup, device = self.lookup, self.span_positions.device
        return lookup.ids[lookup.reused:].to(device), lookup.positions[lookup.reused:].to(device)

    def _context_alone(self) -> None:
        """The uncached context in a pass of its own, no span rows (`context_in_first_step` off)."""
        began = time.perf_counter()
        none = torch.empty(1, 0, dtype=torch.long, device=self.span_positions.device)
        (_, context), = self.model.step([SpanRows(none, none[0], self.lookup.past, *self._uncached())])
        self.denoiser.count_context_time(time.perf_counter() - began)
        self.keep_context(context)

    def keep_context(self, context: list[KV]) -> None:
        """The session's whole context (cached, or extended by its first pass): its from now on,
        and the prefix caches'."""
        self.context = context
        self.denoiser.remember(self.lookup, context)

    def logits(self, ids: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        if self.lookup is None:   # bidirectional layout: every step sees the whole canvas
            is_span = torch.zeros_like(ids, dtype=torch.bool)
            is_span[:, self.span_positions] = True
            hidden = self.model(ids, is_span, return_hidden=True)[:, self.span_positions]
            return self.model.head(hidden if rows is None else hidden[rows])
        if self.context is not None:
            span = ids[:, self.span_positions]
            if self.denoiser.cuda_graphs:
                logits = self._replayed(span)
                if logits is not None:     # [B, S, V]: a static buffer, so what is kept is copied
                    return logits.clone() if rows is None else logits[rows]
            return self.model.span_logits(span, self.span_positions, self.context, rows)
        return self.denoiser.step([self], [ids], [rows])[0]

    def _replayed(self, span: torch.Tensor) -> torch.Tensor | None:
        """The steady step's logits [B, S, V] over every span row (a graph has fixed shapes, so
        the head runs on decided rows too), from the session's graph: captured on its first
        steady step (whose answer is the capture's warm-up call), replayed after. None when the
        capture failed: the denoiser then runs eagerly from now on."""
        if self.graphed is not None:
            return self.graphed(span)
        self.graphed = capture_or_none(
            self.denoiser.name, lambda s: self.model.span_logits(s, self.span_positions, self.context), (span,))
        if self.graphed is None:
            self.denoiser.cuda_graphs = False
            return None
        return self.graphed.first


def trained_max_slot(config: dict) -> int | None:
    """The widest slot the model was trained on (its config.json's `training.max_slot`)."""
    training = config.get("training")
    slot = training.get("max_slot") if isinstance(training, dict) else None
    return slot if isinstance(slot, int) and not isinstance(slot, bool) and slot > 0 else None


class EmbeddedDenoiser(Denoiser):
    family = "embedded"

    def __init__(self, model: EmbeddedModel, tokenizer: Tokenizer, name: str) -> None:
        self.model = model.eval()
        self.tokenizer = plain_text_tokenizer(tokenizer)
        self.name = name
        cfg = model.cfg
        self.special = SpecialTokens(mask_id=cfg.mask_token_id, pad_id=cfg.pad_token_id, eos_id=cfg.eos_token_id)
        self.device = model.embed.weight.device
        self.max_context = cfg.max_positions
        self._prefix_caches: list[PrefixCache] = []   # most recently used last
        self.prefix_cache_entries = PREFIX_CACHE_ENTRIES   # 0: recompute every context (a baseline)
        # False: a session computes its uncached context in a pass of its own as it opens (the
        # baseline `serve --context-pass own` measures the first-step pass against).
        self.context_in_first_step = True
        # Replay a lone request's steady steps from a CUDA graph (`serve --cuda-graphs`; off until
        # a GPU measured it: `dllm-lsp bench` times it beside the eager steps on CUDA).
        self.cuda_graphs = False
        self._lock = threading.Lock()
        self.last_reused_tokens = 0

    @classmethod
    def load(cls, folder: Path, cfg: EmbeddedConfig, tokenizer: Tokenizer, device: torch.device,
             dtype: torch.dtype = torch.float32, max_slot: int | None = None) -> "EmbeddedDenoiser":
        """The weights of `folder` built into a model of `cfg`; the loader has read and checked
        the config and the tokenizer already (each file is read once: the tokenizer of a 150k
        vocabulary takes ~10 MB of JSON to parse)."""
        with torch.device("meta"):
            model = EmbeddedModel(cfg)
        check_weights_match({name: tuple(t.shape) for name, t in model.state_dict().items()},
                            weight_shapes(folder / "model.safetensors"), folder)
        state = load_weights(folder / "model.safetensors", device, dtype)   # bf16, fp32 or int8 on disk
        check_finite(state, folder)
        model.load_state_dict(state, strict=True, assign=True)
        denoiser = cls(model.fuse_projections().to(device), tokenizer, folder.name)
        denoiser.max_slot = max_slot
        return denoiser

    def session(self, canvas: Canvas, batch: int, cache: CacheSettings = CacheSettings()) -> EmbeddedSession:
        # `cache` is for approximate caches: this model's context cache is exact, always on.
        if self.model.cfg.attention_layout == "bidirectional":
            return EmbeddedSession(self, canvas, batch, None)
        lookup = self._lookup(canvas)
        self.last_reused_tokens = lookup.reused
        return EmbeddedSession(self, canvas, batch, lookup)

    def uncached_context_rows(self, canvas: Canvas) -> int:
        if self.model.cfg.attention_layout == "bidirectional":
            return 0
        return self._lookup(canvas).missing

    def pending_rows(self, session: EmbeddedSession) -> int:
        return session.pending_rows

    def _lookup(self, canvas: Canvas) -> ContextLookup:
        """The canvas's context against the prefix caches (nothing computed, nothing changed)."""
        ctx_mask = canvas.context_mask()
        ids, positions = canvas.ids[ctx_mask].cpu(), torch.arange(canvas.length)[ctx_mask.cpu()]
        head = _head(ids, positions)
        with self._lock:
            source, reused = None, 0
            for entry in self._prefix_caches:
                length = entry.reusable_length(ids, positions, head)
                if length > reused:
                    source, reused = entry, length
        past = [(k[:, :, :reused], v[:, :, :reused]) for k, v in source.kv] if source else self._empty_kv()
        return ContextLookup(ids, positions, source, reused, past)

    def forget_requests(self) -> None:
        super().forget_requests()
        with self._lock:
            self._prefix_caches = []

    def remember(self, lookup: ContextLookup, kv: list[KV]) -> None:
        """A session's whole context, once computed, joins the prefix caches (least recently used
        out). It replaces the entry it grew from when it reused that entry's prefix up to a few
        tokens (a keystroke or a backspace at the same spot; the suffix after the cursor has moved,
        so the old entry served only up to the cursor, and one more entry per word typed had
        pushed every other document's out), and any entry that holds this very context (two
        requests that computed it side by side)."""
        with self._lock:
            source = lookup.source
            grew = source is not None and lookup.reused >= source.prefix_length - SAME_SPOT_TOKENS
            self._prefix_caches = [c for c in self._prefix_caches
                                   if not (c is source and grew) and not c.holds(lookup.ids, lookup.positions)]
            self._prefix_caches.append(PrefixCache(lookup.ids, lookup.positions, kv))
            keep = self.prefix_cache_entries
            self._prefix_caches = self._prefix_caches[-keep:] if keep > 0 else []

    def step(self, sessions: list[EmbeddedSession], ids: list[torch.Tensor],
             rows: list[torch.Tensor | None]) -> list[torch.Tensor]:
        """The sessions' logits from one pass (`EmbeddedModel.step`), the context rows a first
        step computes included; their share of the pass's time is counted as context work."""
        began = time.perf_counter()
        parts = [s.span_rows(i, r) for s, i, r in zip(sessions, ids, rows)]
        out = self.model.step(parts)
        seconds = time.perf_counter() - began
        total = sum(p.n_new + p.span.numel() for p in parts)
        for session, part, (_, context) in zip(sessions, parts, out):
            if part.n_new:
                session.keep_context(context)
                self.count_context_time(seconds * part.n_new / total)
        return [logits for logits, _ in out]

    def batch_logits(self, sessions: list[EmbeddedSession], ids: list[torch.Tensor],
                     rows: list[torch.Tensor | None] | None = None) -> list[torch.Tensor] | None:
        """Every session's span logits from one forward pass (`step`)."""
        if len(sessions) < 2 or any(s.lookup is None for s in sessions):
            return None   # one request, or the bidirectional layout (no context cache): nothing to batch
        return self.step(sessions, ids, list(rows) if rows is not None else [None] * len(sessions))

    def _empty_kv(self) -> list[KV]:
        cfg = self.model.cfg
        empty = torch.zeros(1, cfg.n_kv_heads, 0, cfg.head_dim, device=self.device, dtype=self.model.embed.weight.dtype)
        return [(empty, empty) for _ in range(cfg.n_layers)]

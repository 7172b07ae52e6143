"""Context keys/values an open checkpoint keeps across requests (cache mode "reuse").

Typing changes a canvas a little at a time: the next request's context starts with the same
tokens at the same positions (the prefix up to the cursor), and the context after the slot
starts with the same tokens moved by as many positions as were typed (the suffix; its far end
may be cut differently, where the context budget ends). A bidirectional model's keys/values of
those tokens depend on the whole canvas, so no cache of them is exact; the dual cache already
reuses context keys/values computed with an earlier state of the span within a request, and
this reuses them across requests in the same spirit: the first pass of a new request computes
only its new context tokens and its span rows, attending to the kept prefix and suffix, whose
keys are rotated to their new positions (rotary positions compose: R(p + d) = R(d) R(p), so
the move itself is exact). Each reuse adds one generation of staleness; an entry
`max_generations` reuses old is not reused again (the next request takes a full pass and
starts a fresh chain).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from .architecture import KV

DEFAULT_ENTRIES = 8
MIN_SHARE = 0.5          # reuse only when at least half of the new context comes from the entry
MAX_GENERATIONS = 8      # reuses in a row before a full pass recomputes the context


@dataclass
class ContextEntry:
    """One canvas's context: token ids and canvas positions (CPU, canvas order), how many of
    them come before the end of its last slot (`split`: the suffix starts there), and each
    layer's keys/values [1, Hkv, N, D] in the same order."""

    ids: torch.Tensor
    positions: torch.Tensor
    split: int
    kv: list[KV]
    generation: int = 0       # how many reuses produced it (0: a full pass)


@dataclass(frozen=True)
class Reuse:
    """What a new canvas takes from an entry: its first `prefix` context tokens as they are,
    and `tail` tokens from the start of its suffix (entry context index `entry.split` on, new
    index `split` on) moved by `shift` positions."""

    entry: ContextEntry
    prefix: int
    split: int
    tail: int
    shift: int

    @property
    def tokens(self) -> int:
        return self.prefix + self.tail

    def keys_values(self, layer: int, rotate) -> tuple[KV, KV]:
        """One layer's reused keys/values, [1, Hkv, n, D]: the prefix's, and the tail's with
        their keys moved by `shift` (`rotate(k)`; values carry no position)."""
        k, v = self.entry.kv[layer]
        a, b = self.entry.split, self.entry.split + self.tail
        k_tail = rotate(k[:, :, a:b]) if self.shift and self.tail else k[:, :, a:b]
        return (k[:, :, :self.prefix], v[:, :, :self.prefix]), (k_tail, v[:, :, a:b])


class ContextStore:
    """The last `entries` canvases' contexts, least recently used out."""

    def __init__(self, entries: int = DEFAULT_ENTRIES, min_share: float = MIN_SHARE,
                 max_generations: int = MAX_GENERATIONS) -> None:
        self.entries = entries
        self.min_share = min_share
        self.max_generations = max_generations
        self._kept: list[ContextEntry] = []
        self._lock = threading.Lock()

    def match(self, ids: torch.Tensor, positions: torch.Tensor, split: int) -> Reuse | None:
        """The best reuse for a canvas whose context is `ids` at `positions` (CPU, canvas order;
        its suffix from index `split` on), or None when no entry gives at least `min_share` of it."""
        best: Reuse | None = None
        with self._lock:
            kept = list(self._kept)
        for entry in kept:
            if entry.generation >= self.max_generations:
                continue
            reuse = _overlap(entry, ids, positions, split)
            if best is None or reuse.tokens > best.tokens:
                best = reuse
        if best is None or best.tokens == 0 or best.tokens < self.min_share * ids.numel():
            return None
        with self._lock:                         # most recently used last
            if best.entry in self._kept:
                self._kept.remove(best.entry)
                self._kept.append(best.entry)
        return best

    def keep(self, entry: ContextEntry, replaces: ContextEntry | None = None) -> None:
        """Keep a new canvas's context; the entry it was built from (typing moved on) goes."""
        with self._lock:
            self._kept = [e for e in self._kept if e is not replaces]
            self._kept.append(entry)
            self._kept = self._kept[-self.entries:] if self.entries > 0 else []

    def latest(self) -> ContextEntry | None:
        """The entry kept or used last."""
        with self._lock:
            return self._kept[-1] if self._kept else None

    def __len__(self) -> int:
        return len(self._kept)


def _overlap(entry: ContextEntry, ids: torch.Tensor, positions: torch.Tensor, split: int) -> Reuse:
    # The prefix: the same tokens at the same positions, before either canvas's suffix.
    n = min(entry.split, split)
    same = (entry.ids[:n] == ids[:n]) & (entry.positions[:n] == positions[:n])
    miss = (~same).nonzero()
    prefix = int(miss[0, 0]) if miss.numel() else n
    # The suffix: the same tokens from its start on, each moved by the same number of positions.
    m = min(entry.ids.numel() - entry.split, ids.numel() - split)
    if m == 0:
        return Reuse(entry, prefix, split, 0, 0)
    shift = int(positions[split]) - int(entry.positions[entry.split])
    old_ids, old_pos = entry.ids[entry.split:entry.split + m], entry.positions[entry.split:entry.split + m]
    same = (old_ids == ids[split:split + m]) & (positions[split:split + m] == old_pos + shift)
    miss = (~same).nonzero()
    tail = int(miss[0, 0]) if miss.numel() else m
    return Reuse(entry, prefix, split, tail, shift)

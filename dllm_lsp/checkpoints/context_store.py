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

from dllm_lsp.engine.denoiser import matching_run

from .architecture import KV

DEFAULT_ENTRIES = 8
MIN_SHARE = 0.5          # reuse only when at least half of the new context comes from the entry
MAX_GENERATIONS = 8      # reuses in a row before a full pass recomputes the context


@dataclass(eq=False)      # identity: an entry holds tensors
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
class Segment:
    """A run of context tokens a new canvas takes from an entry: entry context indices
    [old, old + length) are the new canvas's [new, new + length), each moved by `shift`."""

    old: int
    new: int
    length: int
    shift: int


@dataclass(frozen=True)
class Reuse:
    """What a new canvas takes from an entry: up to three segments, in canvas order — the
    prefix's start as it is, the rest of the prefix where its window moved (the planner cuts
    the prefix from its start in steps as the cursor moves on), and the suffix's start moved
    by what was typed."""

    entry: ContextEntry
    segments: tuple[Segment, ...]

    @property
    def tokens(self) -> int:
        return sum(s.length for s in self.segments)

    def keys_values(self, layer: int, rotate) -> list[KV]:
        """One layer's reused keys/values per segment, [1, Hkv, length, D], keys moved by each
        segment's shift (`rotate(k, shift)`; values carry no position)."""
        k, v = self.entry.kv[layer]
        out = []
        for seg in self.segments:
            ks, vs = k[:, :, seg.old:seg.old + seg.length], v[:, :, seg.old:seg.old + seg.length]
            out.append((rotate(ks, seg.shift) if seg.shift else ks, vs))
        return out


class ContextStore:
    """The last `entries` canvases' contexts, least recently used out."""

    def __init__(self, entries: int = DEFAULT_ENTRIES, min_share: float = MIN_SHARE,
                 max_generations: int = MAX_GENERATIONS) -> None:
        self.entries = entries
        self.min_share = min_share
        self.max_generations = max_generations
        self._kept: list[ContextEntry] = []
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._kept = []

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


ANCHOR_TOKENS = 8       # tokens that must agree to try an alignment of a moved prefix window
MAX_ANCHORS = 4         # alignments tried (repetitive text matches in many places)


def _overlap(entry: ContextEntry, ids: torch.Tensor, positions: torch.Tensor, split: int) -> Reuse:
    segments = []
    # The prefix's start: the same tokens at the same positions.
    first = _run(entry, 0, ids, positions, 0, min(entry.split, split))
    if first.length:
        segments.append(first)
    # The rest of the prefix, if its window moved: where its next tokens sit further on in the entry.
    at = first.length
    if at < split:
        best = None
        for old in _anchors(entry.ids[:entry.split], ids[at:split], after=at):
            run = _run(entry, old, ids, positions, at, min(entry.split - old, split - at))
            if best is None or run.length > best.length:
                best = run
        if best is not None and best.length:
            segments.append(best)
    # The suffix's start: the same tokens moved by what was typed (its far end may be cut elsewhere).
    tail = _run(entry, entry.split, ids, positions, split, min(entry.ids.numel() - entry.split, ids.numel() - split))
    if tail.length:
        segments.append(tail)
    return Reuse(entry, tuple(segments))


def _run(entry: ContextEntry, old: int, ids: torch.Tensor, positions: torch.Tensor, new: int, most: int) -> Segment:
    """The longest run from entry index `old` and new index `new` of equal tokens all moved by
    the shift of their first."""
    if most <= 0:
        return Segment(old, new, 0, 0)
    shift = int(positions[new]) - int(entry.positions[old])
    length = matching_run(entry.ids[old:old + most], entry.positions[old:old + most],
                          ids[new:new + most], positions[new:new + most], shift)
    return Segment(old, new, length, shift)


def _anchors(old_ids: torch.Tensor, new_ids: torch.Tensor, after: int) -> list[int]:
    """Entry indices past `after` where the first ANCHOR_TOKENS of `new_ids` occur."""
    n = min(ANCHOR_TOKENS, new_ids.numel())
    if n == 0 or old_ids.numel() - after < n:
        return []
    windows = old_ids[after:].unfold(0, n, 1)
    hits = (windows == new_ids[:n]).all(1).nonzero()[:, 0] + after
    return hits[:MAX_ANCHORS].tolist()

"""The port every model family implements, and the canvas it denoises.

A `Denoiser` is plain model code: it encodes and decodes text, and opens a session that answers
"what are the logits at the span positions for this canvas". It runs no loop. The engine owns
every decoding loop (engine/denoise.py, engine/variable_length.py, engine/blockwise.py) and
picks one by the port's `decoding`, so the embedded model (exact context cache) and the open
checkpoints (approximate dual cache) plug into the same loops. A block-diffusion model also
implements `BlockDiffusionPort`, the block loop's view of it, and answers its `BlockStep`s.

Models import this module (and engine/types.py, engine/cuda_graph.py), never a loop module:
tests/architecture/test_import_graph.py holds them to that.
"""
from __future__ import annotations

import functools
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch
from tokenizers import Tokenizer

from .types import CacheSettings


_COUNT_LOCK = threading.Lock()


@dataclass
class ContextCounts:
    """Context work of every session a model opened (Denoiser.open_session)."""

    sessions: int = 0
    tokens: int = 0           # context tokens of those canvases
    reused_tokens: int = 0    # of them, served from a cache kept across requests
    seconds: float = 0.0      # their context work: the prefill or its share of a first step's pass, lookups included


@dataclass(frozen=True)
class SpecialTokens:
    mask_id: int
    pad_id: int | None = None       # the in-slot padding the model learnt to emit after a span
    eos_id: int | None = None       # treated like pad inside a slot when the model has no pad
    bos_id: int | None = None       # prepended to the canvas when the family expects it
    expand_id: int | None = None    # DreamOn: "this slot needs more room"
    delete_id: int | None = None    # DreamOn: "this position does not exist"

    @property
    def end_ids(self) -> tuple[int, ...]:
        """Tokens that mean "the span ended before this position"."""
        return tuple(t for t in (self.pad_id, self.eos_id) if t is not None)


# Special tokens a model may write into a span besides its pad and end of text: from one of the
# end markers on, the span has ended; the other special tokens (fillers, chat and FIM markers) are
# left out of its text. Matched by token id, never by text: `"<pad>"` or JSX's `</s>` spelt with
# ordinary tokens is the user's code, which a cut by text had taken away.
END_MARKERS = frozenset({"<eos>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|dlm_eos|>"})
FILLER_MARKERS = frozenset({"<pad>", "<mask>", "<|mask|>", "<|pad|>", "<|fim_pad|>", "<|expand|>", "<|dlm_pad|>"})


@dataclass(frozen=True)
class TextMarkers:
    """Token ids that are not text in a span: `ends` end it, `dropped` are left out."""

    ends: frozenset[int]
    dropped: frozenset[int]


def text_markers(tokenizer: Tokenizer) -> TextMarkers:
    """The tokenizer's added tokens that are markers, not text: those named in END_MARKERS end a
    span; every other special one, and the FILLER_MARKERS added without the special flag, are
    dropped. Added tokens that are not special (a chat template's `<tool_call>`) stay text."""
    ends, dropped = set(), set()
    for token_id, added in tokenizer.get_added_tokens_decoder().items():
        if added.content in END_MARKERS:
            ends.add(token_id)
        elif added.special or added.content in FILLER_MARKERS:
            dropped.add(token_id)
    return TextMarkers(frozenset(ends), frozenset(dropped))


def plain_text_tokenizer(tokenizer: Tokenizer) -> Tokenizer:
    """`tokenizer`, set to encode the text of special tokens in the user's text as plain text.

    By default `tokenizers` turns `"<pad>"` or `<mask>` written in a file into the special token:
    a tokenizer test's string put a pad (the span's end) or a mask into the model's context.
    Every port sets this on the tokenizer it encodes with, and so does training."""
    tokenizer.encode_special_tokens = True
    return tokenizer


def matching_run(old_ids: torch.Tensor, old_positions: torch.Tensor, new_ids: torch.Tensor,
                 new_positions: torch.Tensor, shift: int = 0) -> int:
    """How many leading tokens of a new context are an earlier context's tokens at the earlier
    positions moved by `shift`: the run of a cached context's keys/values a new canvas can keep."""
    n = min(old_ids.numel(), new_ids.numel())
    if n == 0:
        return 0
    same = (old_ids[:n] == new_ids[:n]) & (new_positions[:n] == old_positions[:n] + shift)
    miss = (~same).nonzero()
    return int(miss[0, 0]) if miss.numel() else n


@dataclass
class Canvas:
    """Token ids of `[context][slot MASK*L][context]...` and where each slot sits."""

    ids: torch.Tensor                      # [T] int64
    slot_ranges: list[tuple[int, int]]     # [start, end) of each slot in `ids`
    single_line: tuple[bool, ...] = ()     # per slot: the planner wants one line (block-wise decoding stops there)
    # Per slot: the most tokens it may grow to (its context was cut to leave room for that);
    # empty: every slot is already at its full width.
    max_widths: tuple[int, ...] = ()

    @property
    def length(self) -> int:
        return int(self.ids.numel())

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in self.slot_ranges)

    @property
    def capacity(self) -> tuple[int, ...]:
        """Per slot, the most tokens it may hold (its current width when it cannot grow)."""
        return self.max_widths or self.widths

    def widened(self, widths: tuple[int, ...], fill: int) -> "Canvas":
        """The same canvas with each slot `widths[i]` wide: new positions (`fill`) go at the
        slot's end, and the context after it moves right."""
        if len(widths) != len(self.slot_ranges) or any(
                not old <= new <= cap for old, new, cap in zip(self.widths, widths, self.capacity)):
            raise ValueError(f"cannot widen slots {self.widths} to {widths} (capacity {self.capacity})")
        ids = self.ids.tolist()
        out: list[int] = []
        ranges: list[tuple[int, int]] = []
        prev = 0
        for (a, b), width in zip(self.slot_ranges, widths):
            out += ids[prev:a]
            start = len(out)
            out += ids[a:b] + [fill] * (width - (b - a))
            ranges.append((start, len(out)))
            prev = b
        out += ids[prev:]
        return Canvas(torch.tensor(out, dtype=torch.long), ranges, self.single_line, self.max_widths)

    def span_positions(self) -> torch.Tensor:
        """Canvas positions of every slot token, slot by slot: [S] int64."""
        parts = [torch.arange(a, b) for a, b in self.slot_ranges]
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.long)

    def span_slot_index(self) -> torch.Tensor:
        """For each span position, the index of its slot: [S] int64."""
        parts = [torch.full((b - a,), i, dtype=torch.long) for i, (a, b) in enumerate(self.slot_ranges)]
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.long)

    def context_mask(self) -> torch.Tensor:
        """[T] bool: True where the token is context (not inside a slot)."""
        ctx = torch.ones(self.length, dtype=torch.bool)
        for a, b in self.slot_ranges:
            ctx[a:b] = False
        return ctx


class DenoiseSession(Protocol):
    """Per-request state (cached context keys/values) of one denoising run."""

    def logits(self, ids: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] (the canvas, slots partly filled) -> logits [B, S, V] at the span positions,
        or [R, V] for the R span rows `rows` ([B, S] bool) selects, in row-major order (a step
        needs logits only where a token is still undecided; the head is skipped elsewhere).

        Families with shifted logits (Dream) shift inside, so row s always predicts span token s.
        """
        ...


class Denoiser(ABC):
    """A loaded model ready to fill canvases."""

    name: str
    family: str
    tokenizer: Tokenizer
    special: SpecialTokens
    device: torch.device
    max_context: int                # the most canvas tokens the model's positions allow
    # The widest slot the model was trained on (its config.json's `training.max_slot`), None where
    # unknown (open checkpoints): planned spans are no wider, a slot past it is untrained ground.
    max_slot: int | None = None
    # Of the last session's context, the tokens served from a cache kept across requests (the
    # embedded model's prefix cache); a model without such a cache leaves it 0.
    last_reused_tokens: int = 0

    @abstractmethod
    def session(self, canvas: Canvas, batch: int, cache: CacheSettings = CacheSettings()) -> DenoiseSession:
        """Prepare a run over `canvas` decoded `batch` times in parallel: its context work happens
        here (a prefill), or in its first step's pass (`pending_rows`)."""

    def uncached_context_rows(self, canvas: Canvas) -> int:
        """Context rows a session over `canvas` opened now would compute in its first step's pass
        (`pending_rows`), for the step scheduler's estimate before the session exists."""
        return 0

    def pending_rows(self, session: DenoiseSession) -> int:
        """Rows the session's next pass computes besides the span rows: the context a model that
        folds its context work into the first step has not computed yet (the embedded model's
        uncached context, an open checkpoint's typed tokens in cache mode "reuse")."""
        return 0

    def open_session(self, canvas: Canvas, batch: int, cache: CacheSettings = CacheSettings(),
                     ids: torch.Tensor | None = None) -> DenoiseSession:
        """`session` and `first_pass`, counted: what the engine's loops call, so that status and
        benchmarks can tell how much of the model's time went to context (`context_stats`)
        rather than steps. `ids` [batch, T]: the canvas the first step will see, if it is not
        `canvas.ids` in every row (a run widened with tokens already committed)."""
        start = time.perf_counter()
        session = self.session(canvas, batch, cache)
        self.first_pass(session, ids if ids is not None else canvas.ids.to(self.device)[None].repeat(batch, 1))
        tokens = int(canvas.context_mask().sum())
        self.count_context(tokens, min(self.last_reused_tokens, tokens), time.perf_counter() - start)
        return session

    def count_context(self, tokens: int, reused_tokens: int, seconds: float) -> None:
        """Count one session's context work (`context_stats`): `open_session` calls it, and a model
        whose loop opens no session (the block-wise checkpoints' context prefill)."""
        with _COUNT_LOCK:
            # Made on first use: families set their own attributes and share no __init__.
            counts = self.__dict__.setdefault("_context_counts", ContextCounts())
            counts.sessions += 1
            counts.tokens += tokens
            counts.reused_tokens += reused_tokens
            counts.seconds += seconds

    def count_context_time(self, seconds: float) -> None:
        """Count context work done after its session opened: the share of a first step's pass
        that went to context rows (`pending_rows`)."""
        with _COUNT_LOCK:
            self.__dict__.setdefault("_context_counts", ContextCounts()).seconds += seconds

    def forget_requests(self) -> None:
        """Drop what earlier requests left: the context counters, and in models that keep one,
        the cross-request context cache (Engine.prepare's synthetic requests must not be
        reused by, or counted with, the first real ones)."""
        with _COUNT_LOCK:
            self.__dict__.pop("_context_counts", None)
        self.last_reused_tokens = 0

    def first_pass(self, session: DenoiseSession, ids: torch.Tensor) -> None:
        """Whatever the first step over `ids` needs beyond a step, run as the session opens: the
        open checkpoints' full pass, which fills their approximate context cache. Nothing for a
        model whose context work is done in `session` or in its first step (the embedded model)."""

    def context_stats(self) -> dict:
        """Sessions opened, their context tokens, how many came from a cross-request cache, and
        the seconds their context work took (cache lookups included: for the embedded model the
        context rows' share of each first step's pass, for the block-wise checkpoints the same
        share of a span's first call, for the open checkpoints the first step's full pass, which
        their later refreshes repeat uncounted, or in cache mode "reuse" the typed tokens' share
        of it)."""
        counts = self.__dict__.get("_context_counts", ContextCounts())
        return {"sessions": counts.sessions, "tokens": counts.tokens, "reusedTokens": counts.reused_tokens,
                "seconds": round(counts.seconds, 6)}

    @property
    def decoding(self) -> str:
        """Which engine loop fills this model's canvases: "variable_length" for a model that
        grows and shrinks its slots with expand/delete tokens (DreamOn), else "fixed"."""
        return "variable_length" if self.special.expand_id is not None else "fixed"

    def batch_logits(self, sessions: list, ids: list[torch.Tensor],
                     rows: list[torch.Tensor | None] | None = None) -> list[torch.Tensor] | None:
        """Logits of several requests' current canvases in one forward pass (each as its
        session's `logits(ids, rows)` would give them), or None when this model has no batched
        forward (the step scheduler then asks each session in turn)."""
        return None

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids if text else []

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False) if ids else ""

    @functools.cached_property
    def markers(self) -> TextMarkers:
        """The special tokens that end a span or are left out of its text (engine: a slot's text)."""
        return text_markers(self.tokenizer)

    def describe(self) -> dict:
        return {"name": self.name, "family": self.family, "device": str(self.device)}


@runtime_checkable
class BlockDiffusionPort(Protocol):
    """What the block-wise loop needs from a model."""

    block_size: int                   # tokens per block; blocks are counted from position 0
    sub_block_size: int | None        # decode a block in sub-blocks of this size, left to right (Fast-dLLM v2)
    special: SpecialTokens
    device: torch.device

    def context_ids(self, prefix: list[int], suffix: list[int]) -> list[int]:
        """The tokens before the span (fill-in-the-middle formatting where the model has it)."""

    def new_cache(self, batch: int) -> Any:
        """An empty KV cache for `batch` rows."""

    def block_logits(self, cache: Any, ids: torch.Tensor, start: int,
                     rows: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] at positions start.. (start: the cache's length; T whole blocks): finished
        blocks not yet in the cache (a span's first call: the context's), which join it exactly,
        then the current block (its last
        `block_size` columns, masks included) -> fp32 logits of the current block [B, block_size, V],
        row i predicting the token at its position i, or [R, V] for the rows `rows` ([B,
        block_size] bool) selects, row-major. The loop keeps the mask out of its choices itself
        (denoise.never_mask), whatever these logits score it."""

    def decode(self, ids: list[int]) -> str:
        """Token ids -> text (special tokens kept)."""


class BlockStep:
    """One model call a block run waits for: its cache, and the position its ids start at.
    What the step scheduler holds as the run's `session` (`logits(ids, rows)`, as a
    masked-diffusion session answers), and what `Denoiser.batch_logits` takes several of."""

    def __init__(self, port: BlockDiffusionPort, cache: Any, start: int) -> None:
        self.port, self.cache, self.start = port, cache, start

    def logits(self, ids: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        return self.port.block_logits(self.cache, ids, self.start, rows)

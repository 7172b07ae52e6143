"""The interface every model family implements, and the canvas it denoises.

The engine owns the sampling loop; a `Denoiser` only answers "what are the logits at the
span positions for this canvas", so the embedded model (exact context cache) and the open
checkpoints (approximate dual cache) plug into one loop.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Protocol

import torch
from tokenizers import Tokenizer


@dataclass(frozen=True)
class SpecialTokens:
    mask_id: int
    pad_id: int | None = None       # the in-slot padding the model learnt to emit after a span
    eos_id: int | None = None       # treated like pad inside a slot when the model has no pad
    bos_id: int | None = None       # prepended to the canvas when the family expects it
    expand_id: int | None = None    # DreamOn: "this slot needs more room"

    @property
    def end_ids(self) -> tuple[int, ...]:
        """Tokens that mean "the span ended before this position"."""
        return tuple(t for t in (self.pad_id, self.eos_id) if t is not None)


@dataclass
class Canvas:
    """Token ids of `[context][slot MASK*L][context]...` and where each slot sits."""

    ids: torch.Tensor                      # [T] int64
    slot_ranges: list[tuple[int, int]]     # [start, end) of each slot in `ids`

    @property
    def length(self) -> int:
        return int(self.ids.numel())

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

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """ids [B, T] (the canvas, slots partly filled) -> logits [B, S, V] at the span positions.

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

    @abstractmethod
    def session(self, canvas: Canvas, batch: int) -> DenoiseSession:
        """Prepare a run over `canvas` decoded `batch` times in parallel (prefill happens here)."""

    def run(self, canvas: Canvas, settings, should_stop, on_step):
        """The denoising loop for this family; families that grow or shrink slots override it."""
        from .denoise import denoise  # noqa: PLC0415

        return denoise(self, canvas, settings, should_stop, on_step)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids if text else []

    def encode_piece(self, text: str, role: str) -> list[int]:
        """Encode one canvas piece ("prefix", "suffix", "middle1", ...) reusing the tokens of the
        same piece of the previous request: between keystrokes only the tail changes."""
        from .token_cache import IncrementalEncoder  # noqa: PLC0415

        encoders = self.__dict__.setdefault("_piece_encoders", {})
        encoder = encoders.get(role)
        if encoder is None or encoder.tokenizer is not self.tokenizer:
            encoder = encoders[role] = IncrementalEncoder(self.tokenizer)
        return encoder.encode(text) if text else []

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False) if ids else ""

    def describe(self) -> dict:
        return {"name": self.name, "family": self.family, "device": str(self.device)}

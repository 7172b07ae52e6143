"""Where each slot of a span stands: the first flagged position of every slot, for a batch.

Shared by the decode loop's rules (engine/denoise.py: ends in order, the end gate, a confident
end closing its slot) and the typed-start gate (engine/span_starts.py), which ask the same
question of different flags: the first undecided position, the first confident end.
"""
from __future__ import annotations

import torch


def slot_firsts(flags: torch.Tensor, slot_of: torch.Tensor, n_slots: int) -> torch.Tensor:
    """flags [B, S] -> [B, n_slots]: the index of each slot's first flagged position (S when the
    slot has none). Branch-free: no host sync."""
    batch, n_span = flags.shape
    index = torch.arange(n_span, device=flags.device).expand(batch, -1)
    first = torch.full((batch, n_slots), n_span, dtype=torch.long, device=flags.device)
    first.scatter_reduce_(1, slot_of.expand(batch, -1), torch.where(flags, index, n_span), reduce="amin")
    return first


def first_in_slot(flags: torch.Tensor, slot_of: torch.Tensor, n_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(index [B, S], first [B, S]): each span position's index, and the index of the first
    flagged position of its slot (S when the slot has none). Branch-free: no host sync."""
    batch, n_span = flags.shape
    index = torch.arange(n_span, device=flags.device).expand(batch, -1)
    return index, slot_firsts(flags, slot_of, n_slots).gather(1, slot_of.expand(batch, -1))

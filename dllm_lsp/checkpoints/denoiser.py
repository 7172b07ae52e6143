"""An open checkpoint as a `Denoiser`: the engine's loop asks it for span logits each step."""
from __future__ import annotations

import torch
from tokenizers import Tokenizer

from dllm_lsp.engine.denoiser import Canvas, Denoiser, SpecialTokens
from dllm_lsp.engine.types import CacheSettings

from .architecture import BidirectionalLM
from .families import Family
from .session import CheckpointSession


class CheckpointDenoiser(Denoiser):
    def __init__(self, model: BidirectionalLM, tokenizer: Tokenizer, special: SpecialTokens, family: Family,
                 name: str, max_context: int) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.special = special
        self.family = family.key
        self.spec = family
        self.name = name
        self.device = model.device
        self.max_context = max_context
        # Embedding rows past the tokenizer's size are padding: never propose them.
        self.vocab_limit = min(model.cfg.vocab_size, tokenizer.get_vocab_size(with_added_tokens=True))
        self.blocked = (special.mask_id,)
        self.last_session: CheckpointSession | None = None   # read by `bench checkpoint` (full passes run)

    def session(self, canvas: Canvas, batch: int, cache: CacheSettings = CacheSettings()) -> CheckpointSession:
        session = CheckpointSession(self.model, canvas, self.spec.shift, cache, self.vocab_limit, self.blocked)
        self.last_session = session
        return session

    def describe(self) -> dict:
        return {
            **super().describe(),
            "family_title": self.spec.title,
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "parameters": self.model.num_parameters(),
        }


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on GPUs (the checkpoints' own dtype); fp32 on the CPU, where bf16 matmuls are slow and inexact."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32

"""A block-diffusion checkpoint as the model port that `dllm_lsp.engine.blockwise` drives.

The port is pure model code: it formats the context (fill-in-the-middle where the tokenizer has
FIM tokens), keeps an exact KV cache of finished blocks, and answers "the logits of this block
given the cache". The decode loop (which positions to commit, when a span ends, when to append
a block to the cache) is the engine's.

Block-causal attention: a token sees every token of its own block and of earlier blocks, blocks
counted from position 0 of the sequence (SDAR's, LLaDA2.0's and Fast-dLLM v2's inference
layout). So a finished block's keys/values never change and the cache is exact. A span's first
call carries the context's whole blocks and the first block (the context's last partial block
with the first masks, as the references decode it): the context joins the cache in that pass.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from dllm_lsp.engine.denoiser import BlockStep, Canvas, SpecialTokens
from dllm_lsp.engine.types import CacheSettings

from .block_families import SDAR, BlockFamily
from .block_model import KV, BlockConfig, BlockLM, random_block_model
from .denoiser import CheckpointPort
from .tiny import tiny_tokenizer


@dataclass(frozen=True)
class FimFormat:
    """Fill-in-the-middle special tokens and their order: "psm" (Qwen: prefix, suffix, middle) or
    "spm" (Seed-Coder: suffix, prefix, middle)."""

    prefix_id: int
    suffix_id: int
    middle_id: int
    order: str = "psm"

    def context(self, prefix: list[int], suffix: list[int]) -> list[int]:
        if self.order == "spm":
            return [self.suffix_id, *suffix, self.prefix_id, *prefix, self.middle_id]
        return [self.prefix_id, *prefix, self.suffix_id, *suffix, self.middle_id]


FIM_TOKENS = (   # (prefix, suffix, middle, order), in the order they are looked for in the tokenizer
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "psm"),      # Qwen2.5 / Qwen3 tokenizers
    ("<[fim-prefix]>", "<[fim-suffix]>", "<[fim-middle]>", "spm"),      # Seed-Coder (Stable-DiffCoder)
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "psm"),
)


def find_fim(tokenizer: Tokenizer) -> FimFormat | None:
    for prefix, suffix, middle, order in FIM_TOKENS:
        ids = [tokenizer.token_to_id(t) for t in (prefix, suffix, middle)]
        if all(i is not None for i in ids):
            return FimFormat(*ids, order=order)
    return None


@dataclass
class BlockCache:
    """Keys/values of every finished position (per layer [B, Hkv, N, D]) and, for families whose logits
    are shifted by one, the hidden state at the last finished position (its logits predict the next token)."""

    kv: list[KV] | None
    length: int = 0
    last_hidden: torch.Tensor | None = None     # [B, D]


class BlockDenoiser(CheckpointPort):
    def __init__(self, model: BlockLM, tokenizer: Tokenizer, special: SpecialTokens, family: BlockFamily, name: str,
                 max_context: int, block_size: int, sub_block_size: int | None, fim: FimFormat | None) -> None:
        super().__init__(model, tokenizer, special, family, name, max_context)
        self.block_size = block_size
        self.sub_block_size = sub_block_size
        self.fim = fim
        self.shift = family.shift

    # -- the port ------------------------------------------------------------------------------

    def context_ids(self, prefix: list[int], suffix: list[int]) -> list[int]:
        """The tokens before the span: FIM-formatted when the tokenizer has FIM tokens (the suffix then
        conditions the span), else the prefix alone (the suffix is used only by post-processing).
        A leading BOS stays first."""
        bos = []
        if prefix and self.special.bos_id is not None and prefix[0] == self.special.bos_id:
            bos, prefix = prefix[:1], prefix[1:]
        if self.fim is None:
            return bos + prefix
        return bos + self.fim.context(prefix, suffix)

    def new_cache(self, batch: int) -> BlockCache:
        return BlockCache(kv=None)

    @torch.no_grad()
    def prefill(self, cache: BlockCache, ids: torch.Tensor, start: int) -> None:
        """Append finished positions start..start+T-1 (ids [B, T], whole blocks) to the cache,
        exactly, with no block to decode (the autoregressive baseline's prompt; the decode loop's
        context joins the cache in its first `block_logits` call instead)."""
        self._check_start(cache, start)
        hidden, new = self.model.ragged([ids.to(self.device)], [start], [cache.kv], self.block_size)[0]
        self._append(cache, hidden, new, ids.shape[1])

    @torch.no_grad()
    def block_logits(self, cache: BlockCache, ids: torch.Tensor, start: int,
                     rows: torch.Tensor | None = None) -> torch.Tensor:
        """ids [B, T] at positions start.. (the cache's length): finished blocks not yet cached, which
        join the cache, then the current block (masks included) -> fp32 logits of the current block
        [B, block_size, V] (row i predicts the token at its position; the shift is applied here),
        or [R, V] for the rows `rows` [B, block_size] selects."""
        return self.batch_logits([BlockStep(self, cache, start)], [ids], [rows])[0]

    def batch_logits(self, sessions: list, ids: list[torch.Tensor],
                     rows: list[torch.Tensor | None] | None = None) -> list[torch.Tensor]:
        """Several block runs' model calls (`engine.denoiser.BlockStep`, the ids and rows each run
        holds) in one forward pass: every request's rows through the weights together, attention
        each request's own over its own cache (`BlockLM.ragged`), one LM-head matmul over the rows
        read. Each request gets what `block_logits` gives it alone."""
        rows = list(rows) if rows is not None else [None] * len(sessions)
        for step in sessions:
            self._check_start(step.cache, step.start)
        began = time.perf_counter()
        with torch.no_grad():
            outs = self.model.ragged([i.to(self.device) for i in ids], [s.start for s in sessions],
                                     [s.cache.kv for s in sessions], self.block_size)
            picked, shapes = [], []
            for step, block_ids, selected, (hidden, new) in zip(sessions, ids, rows, outs):
                source = self._absorb(step.cache, hidden, new, block_ids.shape[1] - self.block_size)
                if selected is None:
                    shapes.append(source.shape[:2])
                    picked.append(source.reshape(-1, source.shape[-1]))
                else:
                    shapes.append(None)
                    picked.append(source[selected.to(self.device)])
            logits = self._logits(torch.cat(picked)).split([p.shape[0] for p in picked])
        self._count_contexts(sessions, ids, time.perf_counter() - began)
        return [part if shape is None else part.view(*shape, -1) for part, shape in zip(logits, shapes)]

    # -- internals -----------------------------------------------------------------------------

    def _count_contexts(self, sessions: list, ids: list[torch.Tensor], seconds: float) -> None:
        """A call from position 0 is a span's first: the rows before its current block are its
        context, counted as context work (`context_stats`) with their share of the pass's time."""
        rows = sum(i.numel() for i in ids)
        for step, block_ids in zip(sessions, ids):
            context = block_ids.shape[1] - self.block_size
            if step.start == 0 and context > 0:
                self.count_context(context, 0, seconds * block_ids.shape[0] * context / rows)

    @staticmethod
    def _check_start(cache: BlockCache, start: int) -> None:
        if start != cache.length:
            raise ValueError(f"rows from position {start} but the cache holds {cache.length} positions")

    def _append(self, cache: BlockCache, hidden: torch.Tensor, new: list[KV], finished: int) -> None:
        """The first `finished` rows of a pass (hidden [B, T, D], their keys/values `new`) join the cache."""
        if finished <= 0:
            return
        new = [(k[:, :, :finished], v[:, :, :finished]) for k, v in new]
        if cache.kv is None:
            cache.kv = new
        else:
            cache.kv = [(torch.cat([k0, k1], 2), torch.cat([v0, v1], 2)) for (k0, v0), (k1, v1) in zip(cache.kv, new)]
        cache.length += finished
        if self.shift:
            cache.last_hidden = hidden[:, finished - 1]

    def _absorb(self, cache: BlockCache, hidden: torch.Tensor, new: list[KV], finished: int) -> torch.Tensor:
        """Cache the finished rows of a pass; -> the hidden states whose logits are the current
        block's [B, block_size, D]: its own rows, or for shifted families the row before each (the
        block's first row from the last cached position; position 0 predicts itself, as the
        references' `cat([logits[:, :1], logits[:, :-1]])`)."""
        self._append(cache, hidden, new, finished)
        block = hidden[:, finished:]
        if not self.shift:
            return block
        first = cache.last_hidden[:, None] if cache.last_hidden is not None else block[:, :1]
        return torch.cat([first, block[:, :-1]], dim=1)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        # The model's scores up to the tokenizer's size, the mask's included: the block loop keeps
        # the mask out of its choices itself (denoise.never_mask).
        return self.model.head(hidden)[..., : self.vocab_limit].float()

    @property
    def decoding(self) -> str:
        return "blockwise"     # the engine runs it as engine.blockwise.BlockwiseRun (engine.RUNS)

    def session(self, canvas: Canvas, batch: int, cache: CacheSettings = CacheSettings()):
        raise TypeError(f"{self.name} is a block-diffusion checkpoint: dllm_lsp.engine.blockwise decodes it "
                        "block by block; it has no whole-canvas denoising session")

    def describe(self) -> dict:
        return {
            **super().describe(),
            "attention": "block-causal",
            "block_size": self.block_size,
            "sub_block_size": self.sub_block_size,
            "fim": self.fim is not None,
        }


# The SDAR-8B / TraDo-8B shape (Qwen3-8B layers), for speed figures with random weights.
SDAR_8B_SHAPE = BlockConfig(vocab_size=151936, dim=4096, n_layers=36, n_heads=32, n_kv_heads=8, head_dim=128,
                            ffn_dim=12288, rope_theta=1_000_000.0, norm_eps=1e-6, qk_norm=True)


def random_block_denoiser(cfg: BlockConfig = SDAR_8B_SHAPE, device: torch.device | str = "cpu",
                          dtype: torch.dtype = torch.bfloat16, block_size: int = 4, seed: int = 0) -> BlockDenoiser:
    """A block-diffusion port of shape `cfg` with random weights straight on `device`, ready for
    `engine.blockwise.decode_blockwise` (speed only: random weights time like trained ones). The
    tokenizer is the tiny byte-level test one, so proposals stay in its ids while the LM head still
    multiplies the full vocabulary; the same `model` run with one-token rows and a growing cache is
    the autoregressive baseline on the same weights."""
    model = random_block_model(cfg, device, dtype, seed)
    tokenizer = tiny_tokenizer(["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|MASK|>"])
    special = SpecialTokens(mask_id=tokenizer.token_to_id("<|MASK|>"), pad_id=tokenizer.token_to_id("<|endoftext|>"),
                            eos_id=tokenizer.token_to_id("<|endoftext|>"))
    return BlockDenoiser(model, tokenizer, special, SDAR, "random-block-model", 32768, block_size, None,
                         find_fim(tokenizer))

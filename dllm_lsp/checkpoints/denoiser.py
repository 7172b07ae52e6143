"""An open checkpoint as a `Denoiser`: the engine's loop asks it for span logits each step."""
from __future__ import annotations

import time

import torch
from tokenizers import Tokenizer

from dllm_lsp.engine.denoiser import Canvas, Denoiser, SpecialTokens, plain_text_tokenizer
from dllm_lsp.engine.types import CacheSettings

from .architecture import BidirectionalLM
from .block_families import BlockFamily
from .context_store import ContextStore
from .families import Family
from .session import CheckpointSession, span_logits


class CheckpointPort(Denoiser):
    """What every checkpoint's port sets up alike, whichever loop decodes it: the model in eval
    mode, its tokenizer set to read special-token text as text, its special tokens, family and
    positions, and `vocab_limit`. CheckpointDenoiser (the masked-diffusion loops) and
    block_denoiser.BlockDenoiser (the block-wise loop) build on it."""

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer, special: SpecialTokens,
                 family: "Family | BlockFamily", name: str, max_context: int) -> None:
        self.model = model.eval()
        self.tokenizer = plain_text_tokenizer(tokenizer)
        self.special = special
        self.family = family.key
        self.spec = family
        self.name = name
        self.device = model.device
        self.max_context = max_context
        # Embedding rows past the tokenizer's size are padding: the logits stop before them, so
        # they are never proposed. (The mask is the engine's to keep out: denoise.never_mask.)
        self.vocab_limit = min(model.cfg.vocab_size, tokenizer.get_vocab_size(with_added_tokens=True))

    def describe(self) -> dict:
        return {
            **super().describe(),
            "family_title": self.spec.title,
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "parameters": self.model.num_parameters(),
        }


class CheckpointDenoiser(CheckpointPort):
    def __init__(self, model: BidirectionalLM, tokenizer: Tokenizer, special: SpecialTokens, family: Family,
                 name: str, max_context: int) -> None:
        super().__init__(model, tokenizer, special, family, name, max_context)
        self.last_session: CheckpointSession | None = None   # read by `bench checkpoint` (full passes run)
        # Cache mode "reuse": contexts kept across requests (`--prefix-cache N` sets how many).
        self.context_store = ContextStore()
        # Replay a session's cached steps from a CUDA graph (`serve --cuda-graphs`; off until a GPU
        # measured it: `bench checkpoint` times it beside the eager steps on CUDA).
        self.cuda_graphs = False

    def forget_requests(self) -> None:
        super().forget_requests()
        self.context_store.clear()

    @property
    def prefix_cache_entries(self) -> int:
        return self.context_store.entries

    @prefix_cache_entries.setter
    def prefix_cache_entries(self, entries: int) -> None:
        self.context_store.entries = entries

    def session(self, canvas: Canvas, batch: int, cache: CacheSettings = CacheSettings()) -> CheckpointSession:
        session = CheckpointSession(self.model, canvas, self.spec.shift, cache, self.vocab_limit,
                                    self.context_store, self.count_context_time, batch, graphs=self)
        self.last_session = session
        self.last_reused_tokens = session.reused_tokens
        return session

    def pending_rows(self, session: CheckpointSession) -> int:
        return session.pending_rows

    @torch.no_grad()
    def batch_logits(self, sessions: list[CheckpointSession], ids: list[torch.Tensor],
                     rows: list[torch.Tensor | None] | None = None) -> list[torch.Tensor] | None:
        """One step of several requests. Those whose step is a cached one (the dual cache: their
        active rows against their stored context, most steps of a request) share one pass
        (`BidirectionalLM.cached_ragged`) and one LM-head matmul: a memory-bound GPU step
        reads a 7B model's weights once for all of them instead of once per request. So does
        the first pass of cache mode "reuse" (the typed tokens and the active rows against the
        kept context: as few rows as a cached step). A request due a full pass (its first
        step, a refresh, no cache) takes it alone: that pass is the context's prefill, bound
        by compute, which sharing would not make cheaper."""
        if len(sessions) < 2:
            return None
        rows = rows if rows is not None else [None] * len(sessions)
        out: list[torch.Tensor | None] = [None] * len(sessions)
        hidden: dict[int, torch.Tensor] = {}     # request -> hidden rows that predict its span tokens
        shared = []
        for i, session in enumerate(sessions):
            first = session.prefilled_step(ids[i])   # a first step whose pass ran at prefill: head only
            if first is not None:
                hidden[i] = first
            elif session.reusing_pass_due() or not session.refresh_due():
                shared.append(i)
            else:
                out[i] = session.logits(ids[i], rows[i])
        if shared:
            began = time.perf_counter()
            reusing = [sessions[i].reusing_pass_due() for i in shared]
            inputs = [sessions[i].shared_step_rows(ids[i]) for i in shared]
            passes = self.model.cached_ragged([x[0] for x in inputs], [x[1] for x in inputs],
                                              [x[2] for x in inputs], keep_kv=any(reusing))
            for i, (h, kv) in zip(shared, passes):
                hidden[i] = sessions[i].took_shared_step(h, kv)
            # A reusing pass's context tokens count as context work, with their share of the pass.
            seconds, total = time.perf_counter() - began, sum(x[0].numel() for x in inputs)
            for i, first, (row_ids, _, _) in zip(shared, reusing, inputs):
                if first:
                    self.count_context_time(seconds * sessions[i].fresh_share * row_ids.numel() / total)
        if hidden:
            order = sorted(hidden)
            picked = [hidden[i] if rows[i] is None else hidden[i][rows[i]] for i in order]
            flat = torch.cat([p.reshape(-1, p.shape[-1]) for p in picked])
            logits = span_logits(self.model, flat, self.vocab_limit)
            for i, p, part in zip(order, picked, logits.split([p.shape[:-1].numel() for p in picked])):
                out[i] = part.view(*p.shape[:-1], -1)
        return out

    def first_pass(self, session: CheckpointSession, ids: torch.Tensor) -> None:
        """The first step's full pass, at the session's opening (`CheckpointSession.prefill`).
        Not a "reuse" first pass: it runs in the first step, shared with other requests' steps."""
        if session.reuse is None:
            session.prefill(ids)

def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on GPUs (the checkpoints' own dtype); fp32 on the CPU, where bf16 matmuls are slow and inexact."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32

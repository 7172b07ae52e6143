"""The engine: InfillRequest in, InfillResult out (tokenize -> canvas -> decode loop -> text).

The engine owns every decoding loop and picks one by the model's `decoding` (RUNS); a model
only answers logits. It also owns the incremental tokenizer cache: between keystrokes only the
tail of each canvas piece changes, so the tokens before it are reused.

Options that change per request (decode settings, context budget, cache mode) are arguments of
`infill`, never state of the shared engine: two clients with different settings can share one.

Thread-safe for any number of callers. Every loop's requests go to the step scheduler
(batching.py) as runs (RUNS: fixed-length, block-wise, variable-length): concurrent requests
share denoising steps, joining and leaving at step boundaries. `batching=False` runs every
request alone under the model lock (the comparison baseline).
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import torch

from .batching import DEFAULT_SLACK, SchedulerClosed, StepScheduler
from .blockwise import BlockwiseRun
from .canvas import CanvasTooSmall, build_canvas
from .denoise import Cancelled, FixedLengthRun, run_alone
from .denoiser import Canvas, Denoiser
from .span_ends import SpanEnds
from .span_starts import SpanStarts, TokenIndex
from .token_cache import IncrementalEncoder
from .token_healing import Healing
from .types import (GROWING_SLOT_START, CacheSettings, DecodeSettings, InfillRequest, InfillResult, StepState,
                    TokenConfidence)
from .variable_length import VariableLengthRun

__all__ = ["Engine", "Cancelled", "CancelToken", "CanvasTooSmall", "RUNS"]

DEFAULT_CONTEXT_TOKENS = 1024
# The most model forward passes one request is planned to take, whatever its slots and options: a
# growing slot gets a fresh step budget at each doubling, and a multi-site request of twenty
# slots starting one token wide at `steps: 256` was allowed ~31,000 passes (minutes of a GPU,
# hours of a CPU, for one request the step scheduler shares with everyone's). 256 is the largest
# step budget the options allow: one window at any budget is always allowed, so the cap only
# takes away growth (the slots start at full width instead) and sampled alternatives of the
# variable-length loop (its candidates run one after another: variable_length_passes). A default
# completion plans at most 51 (one 64-token slot growing from 16 tokens: three windows of 16 steps
# and a greedy fill). The block-wise loop spends a step budget per block: there the cap takes
# steps per block, then width (capped_blocks); a default completion keeps both. Its alternatives
# cost no pass (candidate 0 paces the batch: blockwise.py), so they are never what goes.
MAX_REQUEST_PASSES = 256

# Denoiser.decoding -> the run (one request's loop, one model call at a time) that fills its
# canvases: the step scheduler advances many at once, `run_alone` one (`batching=False`).
RUNS: dict[str, type[FixedLengthRun] | type[BlockwiseRun] | type[VariableLengthRun]] = {
    "fixed": FixedLengthRun,
    "variable_length": VariableLengthRun,
    "blockwise": BlockwiseRun,
}



def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is an allocation that failed: the GPU's (torch.cuda.OutOfMemoryError, or
    cuBLAS failing to allocate its workspace, a plain RuntimeError) or the CPU allocator's (a plain
    RuntimeError saying so). Callers turn it into an error that says so, not a crash: the next
    request may be served once the failed one's tensors are gone."""
    return isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or (
        isinstance(exc, RuntimeError) and any(words in str(exc) for words in OUT_OF_MEMORY_WORDS))


# What torch's plain RuntimeErrors say when an allocation failed (the CPU allocator; cuBLAS's
# handle or workspace on a full GPU, which torch does not raise as OutOfMemoryError; the other
# backends' allocators, "MPS backend out of memory", "HIP out of memory").
OUT_OF_MEMORY_WORDS = ("can't allocate memory", "CUBLAS_STATUS_ALLOC_FAILED", "out of memory")


def growing_passes(request: InfillRequest, start: int, steps: int) -> int:
    """The most forward passes FixedLengthRun takes on `request` with slots starting `start`
    tokens wide: a window of `steps` steps and a greedy fill, and one more window each time a
    slot doubles (every slot full at once is one window, each apart the most), plus a step per
    character of a typed start written past a window's budget."""
    windows = 1 + sum(math.ceil(math.log2(slot.max_tokens / start)) for slot in request.slots
                      if slot.max_tokens > start)
    return windows * (steps + 1) + sum(len(slot.starts_with) for slot in request.slots)


def variable_length_passes(steps: int, n: int) -> int:
    """The most forward passes VariableLengthRun takes at `steps` steps and `n` candidates:
    candidate 0 its steps and a greedy fill, and the alternatives after it the calls it took, or
    two each (a step and a fill) where it took fewer (variable_length.py)."""
    first = steps + 1
    return first + (max(first, 2 * (n - 1)) if n > 1 else 0)


def block_passes(request: InfillRequest, steps: int, block: int, width: int | None = None) -> int:
    """The most forward passes BlockwiseRun takes on `request` at `steps` steps per sub-block of
    `block` tokens, no slot wider than `width`, whatever its candidates (candidate 0 paces them,
    and the slots before the last are decoded once: blockwise.py). Each sub-block a slot's span
    touches (a span may start anywhere in one) takes at most `block` passes, a step commits at
    least a token of each row (`choose_commits`' floor), and at most its steps and a greedy fill;
    a typed start adds a step per character."""
    total = 0
    for slot in request.slots:
        tokens = slot.max_tokens if width is None else min(slot.max_tokens, width)
        touched = (tokens + 2 * block - 2) // block
        total += touched * min(steps + 1, block) + len(slot.starts_with)
    return total


def capped_blocks(request: InfillRequest, settings: DecodeSettings, block: int) -> tuple[InfillRequest, DecodeSettings]:
    """`request` and `settings` planned within MAX_REQUEST_PASSES for the block-wise loop, giving
    up first steps per sub-block, then slot width.

    Steps first: a sub-block of `block` tokens never takes more than `block` passes, so fewer
    steps change nothing until they drop below that (a default completion keeps its steps); below
    it, a block commits more tokens a pass, but the answer keeps its length. Fewer blocks
    (narrower slots) would cut the answer short, and blocks finished sooner are not known up
    front. Only when one step per sub-block is still too many (a span of hundreds of tokens, or
    many slots) do the slots narrow, the widest first. Past that (hundreds of slots) the plan
    stays at one step per sub-block and one token per slot, over the cap. Alternatives cost no
    pass here, so they stay."""
    def fitting_steps(width: int | None = None) -> int:
        return next((steps for steps in range(settings.steps, 0, -1)
                     if block_passes(request, steps, block, width) <= MAX_REQUEST_PASSES), 0)

    steps = fitting_steps()
    if steps:
        return request, replace(settings, steps=steps)
    widest = max(slot.max_tokens for slot in request.slots)
    width = next((width for width in range(widest, 0, -1) if fitting_steps(width)), 1)
    narrowed = replace(request, slots=[replace(slot, max_tokens=min(slot.max_tokens, width)) for slot in request.slots])
    return narrowed, replace(settings, steps=max(1, fitting_steps(width)))


class CancelToken:
    """Set from any thread; the denoise loop checks it at every step boundary."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


# Engine.prepare's requests: code-like text any tokenizer reads, as two contexts of different
# lengths that share no start (no cache serves one from the other), a short one-line slot after
# the long context and a long slot after the short one, so that the step scheduler's fit sees
# span rows and context rows vary apart and not together.
_PROBE_TEXT = "".join(f"def step_{i}(values, scale={i}):\n    return [v * scale for v in values]\n\n\n"
                      for i in range(32))
_PROBES = ((_PROBE_TEXT[:1600], 8), (_PROBE_TEXT[1600:2000], 32))
_PROBE_SETTINGS = DecodeSettings(steps=3, threshold=1.0, slot_start_tokens=0)    # every step runs, full width
_WARM_UP_SETTINGS = DecodeSettings(steps=1, threshold=1.0, slot_start_tokens=0)   # one pass runs every kernel
# A model whose warm-up took longer than this (a 7B checkpoint on a CPU) skips the probe: its
# six steps would cost the load a minute, and its first requests' steps teach the fit anyway.
PROBE_MAX_WARM_UP_S = 1.0


class Engine:
    def __init__(self, denoiser: Denoiser, context_tokens: int = DEFAULT_CONTEXT_TOKENS,
                 batching: bool = True, step_slack: float = DEFAULT_SLACK) -> None:
        self.denoiser = denoiser
        self.context_tokens = context_tokens     # the default budget when a request names none
        self.batching = batching
        self.scheduler = StepScheduler(denoiser, slack=step_slack)
        self._lock = threading.Lock()            # the tokenizer cache
        self._model_lock = threading.Lock()      # requests run alone (batching=False)
        self._encoders: dict[str, IncrementalEncoder] = {}
        self._alone_seconds = 0.0                # requests run under the model lock
        self.prepared: dict | None = None        # what `prepare` measured, once it ran
        self._token_index: TokenIndex | None = None

    def close(self) -> None:
        """Finish the requests in hand and stop the step scheduler's thread for good, which holds the
        model (so that an engine no one uses any more is freed with its weights). A request that
        arrives later still gets its answer: it runs alone, in its caller's thread."""
        self.scheduler.close()

    def encode_piece(self, text: str, role: str) -> list[int]:
        """Encode one canvas piece ("prefix", "suffix", "middle1", ...) reusing the tokens of the
        same piece of the previous request."""
        if not text:
            return []
        encoder = self._encoders.get(role)
        if encoder is None:
            encoder = self._encoders[role] = IncrementalEncoder(self.denoiser.tokenizer)
        return encoder.encode(text)

    def canvas(self, request: InfillRequest, context_tokens: int | None = None,
               start_tokens: int | None = None) -> Canvas:
        budget = self.context_tokens if context_tokens is None else context_tokens
        return build_canvas(self.denoiser, request, budget, self.encode_piece, start_tokens)

    def start_tokens(self, settings: DecodeSettings, request: InfillRequest | None = None) -> int | None:
        """How wide slots start (None: full width). Growing slots are the masked-diffusion loop's
        (FixedLengthRun) and need a model that can end a span (an end token); `settings` may name
        a width or 0 (full width), else GROWING_SLOT_START applies (on every device: on a GPU
        too a narrow slot ends sooner, in fewer steps of about the same cost; serving.md). Full
        width when growing `request`'s slots could take more than MAX_REQUEST_PASSES passes."""
        if RUNS[self.denoiser.decoding] is not FixedLengthRun or not self.denoiser.special.end_ids:
            return None
        start = settings.slot_start_tokens
        if start is None:
            start = GROWING_SLOT_START
        if start and request is not None and growing_passes(request, start, settings.steps) > MAX_REQUEST_PASSES:
            return None
        return start or None

    def infill(
        self,
        request: InfillRequest,
        settings: DecodeSettings = DecodeSettings(),
        cancel: CancelToken | None = None,
        on_step: Callable[[StepState], None] | None = None,
        *,
        context_tokens: int | None = None,
        cache: CacheSettings = CacheSettings(),
    ) -> InfillResult:
        """Fill every slot of `request`. Raises Cancelled if `cancel` fires mid-way, CanvasTooSmall
        when the slots leave no room for context."""
        run = RUNS[self.denoiser.decoding]
        t0 = time.perf_counter()
        # The models read LF line ends: the embedded one never saw a CR (its corpus is read with
        # universal newlines), and a CRLF file's every line put an unseen token in its context
        # (half the completions of CRLF files changed, the 30M model's to junk). The callers put
        # the file's own line breaks back into what is shown (pipeline.finish, multisite.settle).
        request = request.with_lf_line_ends()
        # The piece before a slot gives back punctuation that the tokenizer joins to what follows
        # (token_healing.py); the texts below are the caller's again (`healing.texts`).
        healing = (Healing.of(request, self.token_index, self.denoiser.encode)
                   if run.writes_starts and any(slot.heal_before for slot in request.slots) else None)
        if healing is not None:
            request = healing.request
        if run is VariableLengthRun and variable_length_passes(settings.steps, settings.n) > MAX_REQUEST_PASSES:
            # its candidates run one after another: the alternatives beyond the cap are dropped
            settings = replace(settings, n=next((n for n in range(settings.n - 1, 0, -1)
                                                 if variable_length_passes(settings.steps, n) <= MAX_REQUEST_PASSES), 1))
        if run is BlockwiseRun:
            request, settings = capped_blocks(request, settings,
                                              self.denoiser.sub_block_size or self.denoiser.block_size)
        with self._lock:
            canvas = self.canvas(request, context_tokens, self.start_tokens(settings, request))
        def report_step(step: int, span: torch.Tensor, masked: torch.Tensor, mean_conf: float, budget: int) -> None:
            texts = self.decode_slots(canvas.capacity, span, masked)
            if healing is not None:
                texts = [healing.texts(slots) for slots in texts]
            on_step(StepState(step, budget, texts, mean_conf, int(masked[0].sum())))

        step_cb = report_step if on_step is not None else None
        should_stop = (lambda: cancel.cancelled) if cancel is not None else (lambda: False)

        ends = SpanEnds.for_request(request) if settings.ends_balanced else None   # a scan of the prefix: only when asked
        starts = SpanStarts.for_request(request, self.token_index)

        # The block-wise loop ends a one-line slot at a line break: the tokens holding one are
        # the engine's token table's, as every other tokenizer-level question is.
        lines = ({"tokens": self.token_index()} if run is BlockwiseRun and any(canvas.single_line) else {})

        def make_run():
            return run(self.denoiser, canvas, settings, step_cb, cache, ends, starts=starts, **lines)

        outcome = None
        if self.batching:
            try:
                outcome = self.scheduler.run(make_run, should_stop, rows=run.planned_rows(self.denoiser, canvas, settings))
            except SchedulerClosed:   # a request that reached a closed (retired) engine late: alone
                outcome = None
        if outcome is None:
            with self._model_lock, torch.inference_mode():
                start = time.perf_counter()
                try:
                    outcome = run_alone(make_run, should_stop)
                finally:
                    self._alone_seconds += time.perf_counter() - start
        with torch.inference_mode():
            candidates = self.decode_slots(outcome.canvas.widths, outcome.span_ids, None)
            committed = self.real_tokens(outcome.span_ids[0])
            confidences = (None if outcome.confidence is None else
                           [self.slot_confidences(outcome.canvas.widths, span, conf)
                            for span, conf in zip(outcome.span_ids, outcome.confidence)])
            if healing is not None:
                candidates = [healing.texts(slots) for slots in candidates]
                confidences = confidences and [healing.confidences(slots) for slots in confidences]
        latency_ms = (time.perf_counter() - t0) * 1000
        return InfillResult(candidates=candidates, steps=outcome.steps, tokens_committed=committed,
                            latency_ms=latency_ms, slot_widths=outcome.canvas.widths, confidences=confidences)

    def token_index(self) -> TokenIndex:
        """The model's tokens indexed by text (span_starts.py), built at the first request that
        needs it: the vocabulary decoded once (one batch call; about a second for 152k tokens)."""
        with self._lock:
            if self._token_index is None:
                special = self.denoiser.special
                markers = self.denoiser.markers
                exclude = tuple(sorted({t for t in (special.mask_id, special.pad_id, special.eos_id, special.bos_id,
                                                    special.expand_id, special.delete_id) if t is not None}
                                       | markers.ends | markers.dropped))
                self._token_index = TokenIndex.of(self.denoiser.tokenizer, exclude)
            return self._token_index

    def prepare(self) -> dict:
        """Run the model before the first request, then start its records afresh.

        Warm-up: the first pass pays one-off work (allocations; on a GPU the Triton kernels'
        compile, seconds), which the user's first completion would otherwise wait for, and a
        kernel that fails on this GPU falls back to its reference here (kernels/dispatch.py).
        The model's tokens are indexed by text (`token_index`, for a word typed halfway).
        Probe: two synthetic requests of different sizes through the step scheduler, timed after
        the warm-up, so that its cost model (StepCost) starts from this machine's figures: a
        server that has served nothing yet knows whether sharing a step pays (a GPU) or not (a
        CPU) instead of learning it from its first users' waits (skipped for a model too slow for
        it to be worth the wait, PROBE_MAX_WARM_UP_S). Then the counters and the
        cross-request context caches are cleared (the probe's text must not be reused).
        Returns what it measured (`dllm/status` reports it as `prepared`)."""
        start = time.perf_counter()
        warm = self.infill(InfillRequest.single(_PROBE_TEXT[:200], "\n", 4), _WARM_UP_SETTINGS)
        probe = {"probeSteps": 0, "stepCostMs": None}
        if self.batching and warm.latency_ms <= 1000 * PROBE_MAX_WARM_UP_S:
            self.scheduler.forget(cost=True)
            self.denoiser.forget_requests()      # the probe's contexts all computed, none cached
            for prefix, width in _PROBES:
                self.infill(InfillRequest.single(prefix, "\n", width, single_line=True), _PROBE_SETTINGS)
            probe = {"probeSteps": self.scheduler.request_steps, "stepCostMs": self.scheduler.stats()["stepCostMs"]}
            self.scheduler.forget()
        self._alone_seconds = 0.0
        self.denoiser.forget_requests()
        # The first keystroke inside a word would otherwise wait for the vocabulary's decoding
        # (tens of ms for the embedded model's 8k tokens, about half a second for 152k).
        index_start = time.perf_counter()
        self.token_index()
        self.prepared = {"warmupMs": round(warm.latency_ms, 1), **probe,
                         "tokenIndexMs": round((time.perf_counter() - index_start) * 1000, 1),
                         "seconds": round(time.perf_counter() - start, 3)}
        return self.prepared

    def work_stats(self) -> dict:
        """Where the model's time went: `busySeconds` at work for requests (the step scheduler's
        thread plus loops run alone), and of it the context work (`context`: Denoiser.context_stats).
        Benchmarks take differences between two readings."""
        return {"busySeconds": round(self.scheduler.busy_seconds + self._alone_seconds, 3),
                "context": self.denoiser.context_stats()}

    def real_tokens(self, span: torch.Tensor) -> int:
        special = self.denoiser.special
        skip = torch.tensor([special.mask_id, *special.end_ids], device=span.device)
        return int((~torch.isin(span, skip)).sum())

    def slot_confidences(self, widths: tuple[int, ...], span: torch.Tensor,
                         confidence: torch.Tensor) -> list[list[TokenConfidence]]:
        """One candidate's span [S] and commit confidences [S] -> per slot, the tokens
        `decode_slots` keeps (up to the first end), each with where it ends in the slot's text
        and its confidence. Each token is decoded alone (one batch call), not the slot's prefix
        up to it: a character two byte-level tokens share is counted on both sides, close enough
        for a gate that reads which tokens made the text shown."""
        tokens, scores = span.tolist(), confidence.float().tolist()
        out: list[list[TokenConfidence]] = []
        offset = 0
        for width in widths:
            kept = self._kept(tokens, offset, width)
            pieces = self.denoiser.tokenizer.decode_batch([[tokens[i]] for i in kept], skip_special_tokens=False) \
                if kept else []
            slot, end = [], 0
            for i, piece in zip(kept, pieces):
                end += len(piece)
                slot.append(TokenConfidence(end, scores[i]))
            out.append(slot)
            offset += width
        return out

    def decode_slots(self, widths: tuple[int, ...], span: torch.Tensor, masked: torch.Tensor | None) -> list[list[str]]:
        """[B, S] span tokens, slots of `widths` one after another -> [candidate][slot] text, cut
        at the first pad, masks left out."""
        out: list[list[str]] = []
        rows = span.tolist()
        mask_rows = masked.tolist() if masked is not None else None
        for b, row in enumerate(rows):
            texts, offset = [], 0
            for width in widths:
                kept = self._kept(row, offset, width, mask_rows[b] if mask_rows is not None else None)
                texts.append(self.denoiser.decode([row[i] for i in kept]))
                offset += width
            out.append(texts)
        return out

    def _kept(self, row: list[int], offset: int, width: int, masked: list[bool] | None = None) -> list[int]:
        """The positions of the slot at `offset` whose tokens are its text: up to its first end
        (the model's pad or end of text, or an end marker such as `<|im_end|>`), masks, the other
        special tokens (denoiser.markers) and positions `masked` flags (still undecided) left out."""
        special, markers = self.denoiser.special, self.denoiser.markers
        kept = []
        for i in range(offset, offset + width):
            if masked is not None and masked[i]:
                continue
            token = row[i]
            if token in special.end_ids or token in markers.ends:
                break
            if token != special.mask_id and token not in markers.dropped:
                kept.append(i)
        return kept

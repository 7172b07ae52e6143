"""The fixed-length denoising loop, and the step pieces every engine loop is built from.

Step API (public, shared with engine/variable_length.py and engine/blockwise.py): `propose` (a
token and a confidence per span row), `choose_commits`, `hold_back_early_ends`,
`collapse_after_pad`, `EndGate`, `never_mask`; `constrain` and `commit_step` are a step's rules
and decisions, one copy for the fixed-length and the block-wise loop (they had drifted apart as
two); `FixedLengthRun` holds one request's loop state so the step scheduler (engine/batching.py)
can advance many requests one step at a time.

Each step: logits at every span position, pick a token and a confidence per still-masked
position, commit those above the threshold (at least enough to finish within the step
budget, the extra ones from the left; at most `max_per_step`), and end a slot at its first
committed pad, which may only be decided in order (see hold_back_early_ends), and only where
the span has closed the brackets and strings it opened (see EndGate). A slot that must begin
with a typed word decides its first positions in order until it has written it (StartGate).
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from dllm_lsp.kernels.unmask_select import unmask_select

from .denoiser import Canvas, Denoiser
from .slot_index import first_in_slot
from .span_ends import SpanEnds
from .span_starts import SpanStarts, StartGate
from .types import CacheSettings, DecodeSettings


RUN_STATE_ENV = "DLLM_LSP_RUN_STATE"
RUN_STATES = ("host", "device")


def state_device(model_device: torch.device) -> torch.device:
    """Where a fixed-length run keeps its own state (the canvas, what is undecided, the commit
    confidences) and makes a step's decisions: on the host, unless `DLLM_LSP_RUN_STATE=device`.

    Why: those decisions are many small ops a step on [candidates x span] tensors and about a
    dozen scalar reads (docs/serving.md#the-runs-state-on-the-host). On a GPU each op is a kernel
    launch and each read a device sync: more than the model's own step costs once that replays
    from a CUDA graph. On the host they cost microseconds; a step then copies the canvas and its
    undecided rows to the device and the chosen tokens and their confidences back (one sync),
    and the choice over the vocabulary stays on the device. "device" keeps everything on the
    model's device, as before: `dllm-lsp bench` on CUDA times both, and the GPU job falls back to
    it for the rest of a lease should the host layout fail there."""
    wanted = os.environ.get(RUN_STATE_ENV, "host").strip().lower() or "host"
    if wanted not in RUN_STATES:
        raise ValueError(f"{RUN_STATE_ENV} must be one of {RUN_STATES}, not {wanted!r}")
    return torch.device(model_device) if wanted == "device" else torch.device("cpu")


class Cancelled(Exception):
    """Raised at a step boundary when the caller asked the loop to stop."""


@dataclass(frozen=True)
class StepRows:
    """What one model call runs through the model, as the step scheduler's cost model counts it:
    `span` rows (the decoding's own: every layer, and the LM head for those read) and `context`
    rows (a request's context computed in its first call, for their keys and values only). The
    two are counted apart because their costs differ: the embedded model drops context rows
    before its last layer and never runs them through the LM head, so on a CPU a context row
    costs well under a span row, and a first step of 16 span rows and 200 context rows costs
    nothing like 216 span rows. Counted as one, the scheduler's fit read the cheap context rows
    as a large fixed cost per step and shared steps where sharing made each request slower."""

    span: int = 0
    context: int = 0

    def __add__(self, other: "StepRows") -> "StepRows":
        return StepRows(self.span + other.span, self.context + other.context)


@dataclass
class DenoiseOutcome:
    ids: torch.Tensor          # [B, T] final canvas
    span_ids: torch.Tensor     # [B, S] final span tokens
    steps: int
    canvas: Canvas             # the layout decoded (a family that grows slots returns its new one)
    confidence: torch.Tensor | None = None   # [B, S] each span position's commit confidence (None: not recorded)


def confidence_of(kind: str, prob: torch.Tensor, margin: torch.Tensor, entropy: torch.Tensor) -> torch.Tensor:
    if kind == "prob":
        return prob
    if kind == "margin":
        return margin
    return -entropy


def propose(logits: torch.Tensor, settings: DecodeSettings, generator: torch.Generator | None,
            greedy_rows: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [R, V] -> (token [R], confidence [R] as float32) under `settings`' sampling and
    confidence kind (top-1 probability, top-2 margin or negative entropy). The first
    `greedy_rows` rows are decided greedily whatever the temperature (candidate 0's, when the
    other candidates are sampled alternatives to it: `DecodeSettings.greedy_first`)."""
    if greedy_rows and settings.temperature > 0:
        token, score = propose_greedy(logits[:greedy_rows], settings.confidence)
        rest, rest_score = _select(logits[greedy_rows:], settings.confidence, settings.temperature, generator)
        return torch.cat([token, rest]), torch.cat([score, rest_score])
    return _select(logits, settings.confidence, settings.temperature, generator)


def propose_greedy(logits: torch.Tensor, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [R, V] -> (the top token [R], its confidence of `kind` [R] as float32): a greedy
    fill's choice, scored as a step's commits are."""
    return _select(logits, kind, 0.0, None)


def _select(logits: torch.Tensor, kind: str, temperature: float,
            generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    sel = unmask_select(logits, temperature, generator)
    return sel.token, confidence_of(kind, sel.prob, sel.margin, sel.entropy).float()


def greedy_rows(settings: DecodeSettings, undecided: torch.Tensor) -> int:
    """How many of a step's rows (`undecided` [B, S], row-major) are candidate 0's and decided
    greedily: with `greedy_first` and sampled candidates, its undecided positions; else none."""
    if not settings.greedy_first or settings.temperature <= 0 or undecided.shape[0] < 2:
        return 0
    return int(undecided[0].sum())


def commit_count_floor(masked_left: torch.Tensor, steps_left: int) -> torch.Tensor:
    """The fewest commits this step that still finish every row within the step budget."""
    return torch.ceil(masked_left.float() / max(steps_left, 1)).long()


StepCallback = Callable[[int, torch.Tensor, torch.Tensor, float, int], None]
"""on_step(step, span_ids [B, S], still_masked [B, S], mean_confidence, budget): after each
step, the span laid out at each slot's full width (positions a slot has not grown into read as
ends) and the forward passes allowed so far."""


class SteppedRun(Protocol):
    """One request's decoding, advanced one model call at a time: what the step scheduler
    (engine/batching.py) drives for several requests at once: `FixedLengthRun` (masked
    diffusion), `variable_length.VariableLengthRun` (DreamOn) and `blockwise.BlockwiseRun`
    (block diffusion). Creating one starts the request's context work: a prefill, or a cache
    lookup whose misses its first model call computes."""

    session: Any            # answers `logits(ids, rows)`; `Denoiser.batch_logits` takes several
    ids: torch.Tensor       # what the next call runs
    step_rows: StepRows     # what the next call runs through the model (the cost model's size)
    needs_greedy_fill: bool  # the next call is a window's last: taken even when the request was cancelled

    def wants_logits(self) -> bool:
        """Whether another model call is needed (False: `outcome()` is ready)."""

    def rows(self) -> torch.Tensor:
        """Which rows of the next call's logits `advance` reads (bool)."""

    def advance(self, logits: torch.Tensor) -> None:
        """Apply the logits of the rows `rows()` selects, [R, V] row-major."""

    def outcome(self) -> "DenoiseOutcome":
        ...


@dataclass
class ModelCall:
    """One model call a run waits for (the runs written as generators: block-wise, variable-length)."""

    session: Any             # answers logits(ids, rows)
    ids: torch.Tensor        # what the call runs
    rows: torch.Tensor       # bool: the rows whose logits the run reads
    greedy: bool             # the last fill after a step budget: taken even when the request was cancelled
    context_rows: int = 0    # of `ids`' rows, those computed as context (a block model's finished blocks)


class CallRun:
    """A `SteppedRun` whose loop is a generator: it yields each `ModelCall` it needs and takes the
    logits back, so the decisions stay in one loop and who answers the calls (the model alone,
    or a shared step) is the caller's choice. Creating the run runs the loop to its first call."""

    def __init__(self, calls: Generator[ModelCall, torch.Tensor, "DenoiseOutcome"]) -> None:
        self._calls = calls
        self._call: ModelCall | None = None
        self._outcome: DenoiseOutcome | None = None
        self._resume(None)

    def _resume(self, logits: torch.Tensor | None) -> None:
        try:
            self._call = self._calls.send(logits)
        except StopIteration as done:
            self._call, self._outcome = None, done.value

    def wants_logits(self) -> bool:
        return self._call is not None

    @property
    def needs_greedy_fill(self) -> bool:
        return self._call is not None and self._call.greedy

    @property
    def session(self) -> Any:
        return self._call.session

    @property
    def ids(self) -> torch.Tensor:
        return self._call.ids

    def rows(self) -> torch.Tensor:
        return self._call.rows

    @property
    def step_rows(self) -> StepRows:
        """What the next call runs through the model."""
        call = self._call
        if call is None:
            return StepRows()
        return StepRows(int(call.ids.numel()) - call.context_rows, call.context_rows)

    def advance(self, logits: torch.Tensor) -> None:
        """Apply the logits of the call in hand (its `rows()`, [R, V] row-major) and run to the next call."""
        self._resume(logits)

    def outcome(self) -> "DenoiseOutcome":
        return self._outcome


def run_alone(make_run: Callable[[], SteppedRun], should_stop: Callable[[], bool]) -> "DenoiseOutcome":
    """Create a run (unless already cancelled: no prefill then) and drive it to its end with its own
    model calls (no shared steps); Cancelled at a step boundary when `should_stop` says so (a
    window's last greedy fill is still taken)."""
    if should_stop():
        raise Cancelled()
    run = make_run()
    while run.wants_logits():
        if should_stop() and not run.needs_greedy_fill:
            raise Cancelled()
        run.advance(run.session.logits(run.ids, run.rows()))
    return run.outcome()


class FixedLengthRun:
    """One request's fixed-length denoising, one step at a time: the state of `denoise`'s loop.

    `denoise` drives it alone (`advance(session.logits(ids, rows()))` until done); the step scheduler
    (engine/batching.py) drives many at once, computing their logits in one batched forward
    pass where the model can, so requests join and leave at step boundaries.

    Slots that grow (a canvas built with `start_tokens`, `Canvas.max_widths`): a slot starts
    narrow, and when the model has filled it to its last position with real tokens (no end), it
    doubles, up to its capacity, and the run goes on over the new positions with a fresh step
    budget. Why: a step costs in proportion to its span rows (the LM head, the MLPs), and most
    spans are short (HumanEval's single lines: 85% within 15 tokens); a 32-token line-tail slot
    paid for 32 rows at every step to produce 8 tokens and 24 pads. The model was trained with
    slot widths drawn uniformly above the span's length, exactly full 15% of the time, so a
    narrow slot is in its training distribution, and filling it to the end is its way of saying
    "longer than this" (DreamOn's expansion, decided by the engine at the slot's end).

    Several candidates (alternatives, `DecodeSettings.n`): candidate 0, the one the editor shows
    first, leads, and the others cost it at most one pass. A slot grows only where candidate 0
    filled it (a candidate still deciding it gets the room too, its undecided positions carried
    into the new window), and once candidate 0 has decided a window without growing, the next
    pass is the greedy fill of what the others left undecided, and the run ends. Why: the batch
    runs until every row is done, and sampled candidates commit less confidently (more steps) and
    fill slots candidate 0 does not (a fresh window per growth): with the shipped CPU model, four
    candidates took up to five times the passes of the first alone (32 against 6), which waited
    for them. Candidate 0's rows read only its own canvas, which the others no longer widen, so
    its text is the one it has alone. An alternative cut short by the fill or by a slot it filled
    is post-processing's to refuse.
    """

    writes_starts = True     # applies a request's SpanStarts (engine/span_starts.py)

    def __init__(self, denoiser: Denoiser, canvas: Canvas, settings: DecodeSettings,
                 on_step: StepCallback | None = None, cache: CacheSettings = CacheSettings(),
                 ends: SpanEnds | None = None, starts: SpanStarts | None = None) -> None:
        device = denoiser.device
        self.denoiser, self.settings, self.on_step, self.cache = denoiser, settings, on_step, cache
        self.special = special = denoiser.special
        self.batch = settings.n
        self.host = host = state_device(device)    # where the run's own state lives (state_device)
        self.end_ids = torch.tensor(special.end_ids or (-1,), device=host)
        self.gate = EndGate.for_run(ends, settings, denoiser)
        self.starts = StartGate.for_run(starts, self.batch)
        self.pad_fill = special.end_ids[0] if special.end_ids else special.mask_id
        self.generator = (torch.Generator(device=device).manual_seed(settings.seed)
                          if settings.temperature > 0 else None)
        # An end decided in order closes its slot however confident it was: everything before it is decided.
        self.collapse_threshold = -math.inf if settings.ends_in_order else settings.pad_collapse_threshold
        self.steps = 0                  # forward passes run
        self.budget = settings.steps    # forward passes allowed so far (`steps` more per growth)
        self.filled = False
        n_span = canvas.span_positions().numel()
        self._open(canvas, canvas.ids.to(host)[None].repeat(self.batch, 1),
                   torch.ones(self.batch, n_span, dtype=torch.bool, device=host),
                   torch.zeros(self.batch, n_span, device=host))

    def _open(self, canvas: Canvas, ids: torch.Tensor, masked: torch.Tensor, committed_conf: torch.Tensor,
              pinned: torch.Tensor | None = None) -> None:
        """Lay the run out on `canvas` (the first, or a widened one) and open its model session."""
        host = self.host
        self.canvas = canvas
        self.span_pos = canvas.span_positions().to(host)
        self.slot_of = canvas.span_slot_index().to(host)
        self.n_span = self.span_pos.numel()
        self.n_slots = len(canvas.slot_ranges)
        self.canvas_ids, self.masked, self.committed_conf = ids, masked, committed_conf
        self.pinned = pinned if pinned is not None else torch.zeros_like(masked)   # a typed start's positions
        self._for_model: tuple[torch.Tensor, torch.Tensor] | None = None
        # Its context work starts here.
        self.session = self.denoiser.open_session(canvas, self.batch, self.cache, self.ids)
        self.step_index = 0             # loop iterations in this window (the step budget counts these)

    @property
    def ids(self) -> torch.Tensor:
        """[B, T]: the canvas the next model call runs, on the model's device."""
        return self._model_inputs()[0]

    def rows(self) -> torch.Tensor:
        """[B, S] bool on the model's device: the span rows whose logits the next `advance` reads
        (the undecided ones). Decided rows still go through the model's layers (every span row
        attends to them), but need no LM head and no selection over the vocabulary."""
        return self._model_inputs()[1]

    def _model_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        # The run's state copied to the model's device once a step (nothing when they are one device).
        if self._for_model is None:
            device = self.denoiser.device
            self._for_model = (self.canvas_ids.to(device), self.masked.to(device))
        return self._for_model

    @property
    def done(self) -> bool:
        return self.filled

    @property
    def needs_greedy_fill(self) -> bool:
        """The step budget ran out with holes left (remasking, or ends held back), and no slot
        is still writing a typed start (that takes its steps, StartGate); or, with several
        candidates, candidate 0 has decided its window and the others have holes left, whatever
        their budget or typed start (the class docstring says why)."""
        if not self.masked.any():
            return False
        if self._leader_done:
            return True
        return self.step_index >= self.settings.steps and not self._writing_start

    @property
    def _leader_done(self) -> bool:
        """Several candidates, and candidate 0 has nothing left to decide in this window (the class
        docstring says why the others then stop)."""
        return self.batch > 1 and not bool(self.masked[0].any())

    @property
    def _writing_start(self) -> bool:
        # A typed start is written one token a step, past the budget if need be (at most one step
        # per character typed): a greedy fill would guess the tokens after it without it.
        return self.starts is not None and self.starts.pending

    def wants_logits(self) -> bool:
        """Whether this run needs another forward pass (a step, the final greedy fill, or the
        first step after a slot grew)."""
        if self.filled:
            return False
        if self._leader_done:
            # Candidate 0 decides what happens next (class docstring): a slot it filled grows, the
            # others' undecided positions carried into the new window; else their greedy fill.
            if self._widen_full_slots() or self.needs_greedy_fill:
                return True
        elif (self.step_index < self.settings.steps or self._writing_start) and self.masked.any():
            return True
        elif self.needs_greedy_fill or self._widen_full_slots():
            return True
        self.filled = True
        return False

    def _widen_full_slots(self) -> bool:
        """Double every slot that can grow and that candidate 0 filled to its last position with a
        real token (the class docstring says why not any candidate's); True when one grew. The new
        positions are masks in the candidates whose slot was full or still undecided, and ends in
        the others (their slot had already ended); undecided positions stay so."""
        canvas, special = self.canvas, self.special
        if not canvas.max_widths or not special.end_ids:
            return False
        span = self.canvas_ids[:, self.span_pos]
        widths, new_widths, full_rows = canvas.widths, [], []
        offset = 0
        for width, cap in zip(widths, canvas.capacity):
            last = span[:, offset + width - 1]
            full = ~torch.isin(last, self.end_ids) & (last != special.mask_id)     # [B]
            grows = width < cap and bool(full[0])
            new_widths.append(min(2 * width, cap) if grows else width)
            # A candidate still deciding the slot (carried past candidate 0's window) may need the room too.
            full_rows.append(full | self.masked[:, offset:offset + width].any(-1))
            offset += width
        if tuple(new_widths) == widths:
            return False
        wide = canvas.widened(tuple(new_widths), self.pad_fill)
        new_span = relayout(span, widths, new_widths, self.pad_fill)
        conf = relayout(self.committed_conf, widths, new_widths, 0.0)
        masked = relayout(self.masked, widths, new_widths, False)
        start = 0
        for width, new_width, full in zip(widths, new_widths, full_rows):
            masked[full, start + width:start + new_width] = True
            start += new_width
        new_span[masked] = special.mask_id
        ids = wide.ids.to(self.host)[None].repeat(self.batch, 1)
        ids[:, wide.span_positions().to(self.host)] = new_span
        self._open(wide, ids, masked, conf, relayout(self.pinned, widths, new_widths, False))
        self.budget += self.settings.steps
        return True

    def at_capacity(self, span: torch.Tensor, masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """span, masked [B, S] laid out at each slot's full width (what a step report shows):
        positions a slot has not grown into read as ends."""
        widths, capacity = self.canvas.widths, self.canvas.capacity
        if widths == capacity:
            return span, masked
        return relayout(span, widths, capacity, self.pad_fill), relayout(masked, widths, capacity, False)

    @staticmethod
    def planned_rows(denoiser: Denoiser, canvas: Canvas, settings: DecodeSettings) -> StepRows:
        """What the first step will carry, before the run exists (the scheduler's group choice):
        the span rows of every candidate, and the context rows no cache holds where the model
        computes them in that step."""
        return StepRows(canvas.span_positions().numel() * settings.n, denoiser.uncached_context_rows(canvas))

    @property
    def step_rows(self) -> StepRows:
        """What the next step runs through the model (the step scheduler's cost model): the span
        rows, and on a first step the context rows it computes."""
        return StepRows(int(self.masked.numel()), self.denoiser.pending_rows(self.session))

    def advance(self, logits: torch.Tensor) -> None:
        """Apply the logits of the current canvas (`self.ids`) at the rows `rows()` selects,
        [R, V] in row-major order: one step, or the greedy fill. The logits, and the choice of a
        token and a confidence per row over the vocabulary, stay on the model's device; the rest
        of the step reads those two vectors on the run's own device (state_device)."""
        masked = self.masked
        self._for_model = None                  # the state changes: copied again for the next call
        slot_of, end_ids, n_slots = self.slot_of, self.end_ids, self.n_slots
        starts = self.starts
        span_now = self.canvas_ids[:, self.span_pos]      # a copy: the canvas changes only where written back
        constrain(logits, span_now, masked, masked, slot_of, self.canvas.widths, self.special.mask_id, self.gate,
                  starts)
        if self.needs_greedy_fill:
            # The last pass of a window; the run ends after it unless a slot grows.
            token, score = (t.to(self.host) for t in propose_greedy(logits, self.settings.confidence))
            span_now[masked] = token
            self.committed_conf[masked] = score
            if starts is not None:
                starts.record(span_now)
            self.canvas_ids[:, self.span_pos] = span_now
            self.masked[:] = False
            self.steps += 1
            return
        settings, special = self.settings, self.special
        step = self.step_index
        self.steps += 1
        self.step_index += 1
        decided = commit_step(logits, span_now, masked, slot_of, self.canvas.widths, end_ids, special.mask_id,
                              settings, settings.steps - step, self.generator, greedy_rows(settings, masked),
                              self.host, self.gate, starts)
        commit, proposal, conf = decided.commit, decided.proposal, decided.conf
        if decided.forced is not None:
            self.pinned |= decided.forced      # a typed start's tokens are never re-opened (remasking below)
        span_now = torch.where(commit, proposal, span_now)
        self.committed_conf = torch.where(commit, conf, self.committed_conf)
        masked &= ~commit
        if settings.remask_below is not None and step + 1 < settings.steps:
            # Error correction: re-open committed tokens the model has since lost faith in.
            # A typed start's tokens stay: the gate has taken them off what is left to write.
            reopen = ~masked & ~commit & ~self.pinned & (self.committed_conf < settings.remask_below)
            span_now = torch.where(reopen, torch.full_like(span_now, special.mask_id), span_now)
            masked |= reopen
        span_now, self.masked = collapse_after_pad(
            span_now, masked, commit, conf, slot_of, end_ids, self.pad_fill, self.collapse_threshold,
            n_slots=n_slots,
        )
        self.canvas_ids[:, self.span_pos] = span_now
        if self.on_step is not None:
            finite = conf[commit]
            mean_conf = float(finite.float().mean()) if finite.numel() else 0.0
            # the budget, or the steps run when a typed start or the last greedy fill took more
            # (a stream reported step 17 of 16)
            self.on_step(self.steps, *self.at_capacity(span_now, self.masked.clone()), mean_conf,
                         max(self.budget, self.steps))

    def outcome(self) -> DenoiseOutcome:
        return DenoiseOutcome(self.canvas_ids, self.canvas_ids[:, self.span_pos], self.steps, self.canvas,
                              self.committed_conf)


def denoise(
    denoiser: Denoiser,
    canvas: Canvas,
    settings: DecodeSettings,
    should_stop: Callable[[], bool] = lambda: False,
    on_step: StepCallback | None = None,
    cache: CacheSettings = CacheSettings(),
    ends: SpanEnds | None = None,
) -> DenoiseOutcome:
    """Fill every slot of `canvas`, `settings.n` candidates in parallel; `on_step` (StepCallback)
    runs after each step; `ends`: where slots may end (EndGate). The outcome's canvas is the one
    decoded (slots may have grown)."""
    return run_alone(lambda: FixedLengthRun(denoiser, canvas, settings, on_step, cache, ends), should_stop)


def never_mask(logits: torch.Tensor, mask_id: int) -> None:
    """A mask is never an answer: logits [..., V] get -inf at the mask id, in place. The engine
    applies it whatever the model (the embedded model's head scores the mask like any token). The
    logits may stop at the tokenizer's last token, before a mask id the embedding alone has (a
    checkpoint folder without its tokenizer_config.json): such a mask is never proposed anyway."""
    if mask_id < logits.shape[-1]:
        logits[..., mask_id] = -math.inf


def constrain(logits: torch.Tensor, span: torch.Tensor, selected: torch.Tensor, masked: torch.Tensor,
              slot_of: torch.Tensor, widths: tuple[int, ...], mask_id: int, gate: "EndGate | None",
              starts: StartGate | None) -> None:
    """The rules a step's logits obey before any token is chosen from them, in every loop that
    writes starts and ends (the fixed-length and block-wise loops, their steps and their greedy
    fills alike), applied in place to logits [R, V] at the rows `selected` [B, S] picks
    (row-major): no end at a frontier whose slot's text is still open (EndGate), only tokens
    that agree with a typed start at its frontier (StartGate; `masked` [B, S]: the undecided
    positions its frontiers are found in), never the mask. `span` [B, S]: the span so far."""
    if gate is not None:
        gate.refuse_at_frontier(logits, span, selected, slot_of, widths)
    if starts is not None:
        starts.restrict(logits, selected, masked, slot_of, len(widths))
    never_mask(logits, mask_id)


@dataclass
class Commits:
    """What one step decided (commit_step), on the run's own device, each [B, S]."""

    commit: torch.Tensor              # bool: positions decided this step
    proposal: torch.Tensor            # the token proposed at each undecided position (mask id elsewhere)
    conf: torch.Tensor                # its confidence (-inf elsewhere, and where it was held back)
    forced: torch.Tensor | None       # bool: a typed start's frontiers, committed whatever their confidence
    # Each proposal's own confidence, where `conf` holds back what follows an unfinished typed
    # start (-inf elsewhere): what a fill that takes every proposal records (blockwise._fill_others).
    score: torch.Tensor


def commit_step(logits: torch.Tensor, span: torch.Tensor, todo: torch.Tensor, slot_of: torch.Tensor,
                widths: tuple[int, ...], end_ids: torch.Tensor, mask_id: int, settings: DecodeSettings,
                steps_left: int, generator: torch.Generator | None, greedy: int, host: torch.device,
                gate: "EndGate | None", starts: StartGate | None) -> Commits:
    """One step's decisions, the same in the fixed-length and block-wise loops: from the logits
    (after `constrain`) of the rows `todo` [B, S] selects, row-major, a proposal and a confidence
    per row (`greedy`: how many leading rows are chosen greedily, `propose`), then which to commit:
    the typed start in order (StartGate.hold_back), ends only at their slot's frontier
    (hold_back_early_ends) with a confident end right behind this step's commits closing the
    slot now, where EndGate allows it (`span` [B, S]: the span before this step), the rest by
    `choose_commits` within `steps_left`; last, a typed start's frontiers whatever their confidence.
    The caller writes the commits into its own state (and the fixed loop pins `forced` against
    remasking: the block loop does not remask)."""
    n_slots = len(widths)
    # One per row of `todo`, row-major, chosen on the model's device; read on the run's (one sync).
    token, score = (t.to(host) for t in propose(logits, settings, generator, greedy))
    # Back to [B, S]: decided rows get no proposal (the mask id) and no confidence.
    conf = torch.full(todo.shape, -math.inf, device=todo.device)
    conf[todo] = score
    proposal = torch.full(todo.shape, mask_id, dtype=torch.long, device=todo.device)
    proposal[todo] = token
    own = conf      # hold_back returns a copy: this stays each proposal's own confidence
    if starts is not None:
        conf = starts.hold_back(conf, proposal, slot_of)    # a slot writing its typed start: in order
    if settings.ends_in_order:
        commit = choose_commits(hold_back_early_ends(conf, proposal, todo, slot_of, end_ids, n_slots),
                                todo, settings, steps_left=steps_left)
        # An end right after this step's commits is in order too: a confident one closes the slot now.
        at_frontier = hold_back_early_ends(conf, proposal, todo & ~commit, slot_of, end_ids, n_slots)
        ends_now = todo & torch.isin(proposal, end_ids) & (at_frontier >= settings.threshold)
        if gate is not None:
            ends_now = gate.allowed(ends_now, torch.where(commit, proposal, span), slot_of, widths)
        commit |= ends_now
    else:
        commit = choose_commits(conf, todo, settings, steps_left=steps_left)
    forced = starts.forced(todo.shape, todo.device) if starts is not None else None
    if forced is not None:
        commit |= forced
        starts.record(proposal)
    return Commits(commit, proposal, conf, forced, own)


def relayout(x: torch.Tensor, widths: tuple[int, ...], new_widths, fill) -> torch.Tensor:
    """x [B, sum(widths)], slot after slot -> [B, sum(new_widths)]: each slot's columns at the
    start of its new range, `fill` after them (every new width >= its old one)."""
    out = torch.full((x.shape[0], sum(new_widths)), fill, dtype=x.dtype, device=x.device)
    old = new = 0
    for width, new_width in zip(widths, new_widths):
        out[:, new:new + width] = x[:, old:old + width]
        old, new = old + width, new + new_width
    return out


def hold_back_early_ends(conf, proposal, masked, slot_of, end_ids, n_slots):
    """Make an end (pad) proposal uncommittable unless every earlier position of its slot is decided.

    Before any content is decided the model is surest of the pads at a slot's far end; commit
    those first and each step sees more pads after the undecided positions, so the pads creep
    leftwards until the span ends before it starts (the first CPU preview returned an empty
    completion almost every time). Deciding the end only at the slot's first undecided
    position lets content fill from the front, and the span ends where the model first says so.
    """
    index, first_masked = first_in_slot(masked, slot_of, n_slots)
    frontier = index == first_masked
    early_end = torch.isin(proposal, end_ids) & ~frontier
    return torch.where(early_end, -math.inf, conf)


class EndGate:
    """Lets a slot end only where its text so far has closed what it opened (SpanEnds).

    With ends decided in order (hold_back_early_ends), a slot can only end at its frontier, its
    first undecided position, and everything before the frontier is decided: that text is what
    SpanEnds judges. Two places ask: before a step's proposals, a frontier whose text is still open
    gets no end among its choices (the model's best other token is proposed instead); after the
    step's commits, an end proposed right behind them is committed only if the text they complete
    allows it (else it stays undecided and the next step asks the first question). Each question
    decodes a few tokens and scans them on the host: a small synchronisation per step.
    """

    def __init__(self, allows: Callable[[int, str], bool], decode: Callable[[list[int]], str],
                 end_ids: torch.Tensor) -> None:
        self.allows, self.decode, self.end_ids = allows, decode, end_ids     # allows(slot, text so far)

    @classmethod
    def for_run(cls, ends: SpanEnds | None, settings: DecodeSettings, model: Any,
                only_slot: int | None = None) -> "EndGate | None":
        """The gate a run over `model` (a Denoiser or a block-diffusion port: its `decode`,
        `special` and `device`) applies, or None: no rules, the rule switched off, or no ends
        decided in order (only then is everything before an end known). `only_slot`: the run
        decodes that slot of the request alone (the block-wise loop), as its slot 0."""
        end_ids = model.special.end_ids
        if ends is None or not settings.ends_balanced or not settings.ends_in_order or not end_ids:
            return None
        allows = ends.allows if only_slot is None else (lambda _slot, text: ends.allows(only_slot, text))
        return cls(allows, model.decode, torch.tensor(end_ids, device=model.device))

    def _open(self, places: list[list[int]], span: torch.Tensor, slot_of: torch.Tensor,
              widths: tuple[int, ...]) -> list[tuple[int, int]]:
        """Of the (candidate, position) `places`, each its slot's frontier in `span` [B, S], those
        whose slot's text so far is still open."""
        starts, tokens, slots = _slot_starts(widths), span.tolist(), slot_of.tolist()
        return [(b, position) for b, position in places
                if not self.allows(slots[position], self.decode(tokens[b][starts[slots[position]]:position]))]

    def refuse_at_frontier(self, logits: torch.Tensor, span: torch.Tensor, masked: torch.Tensor,
                           slot_of: torch.Tensor, widths: tuple[int, ...]) -> None:
        """logits [R, V] at the rows `masked` [B, S] selects (row-major): no end at a frontier
        whose slot's text is open."""
        index, first = first_in_slot(masked, slot_of, len(widths))
        frontier = (masked & (index == first)).nonzero().tolist()
        if not frontier:
            return
        rows = (masked.flatten().cumsum(0) - 1).tolist()
        n_span = masked.shape[1]
        for b, position in self._open(frontier, span, slot_of, widths):
            logits[rows[b * n_span + position], self.end_ids] = -math.inf

    def allowed(self, ends: torch.Tensor, span: torch.Tensor, slot_of: torch.Tensor,
                widths: tuple[int, ...]) -> torch.Tensor:
        """ends [B, S] bool (ends about to be committed; every earlier position of their slot
        decided in `span`) -> those whose slot's text allows it."""
        found = ends.nonzero().tolist()
        if not found:
            return ends
        keep = ends.clone()
        for b, position in self._open(found, span, slot_of, widths):
            keep[b, position] = False
        return keep


def _slot_starts(widths: tuple[int, ...]) -> list[int]:
    starts, offset = [], 0
    for width in widths:
        starts.append(offset)
        offset += width
    return starts


def choose_commits(conf: torch.Tensor, masked: torch.Tensor, settings: DecodeSettings, steps_left: int) -> torch.Tensor:
    """[B, S] bool: which masked positions to commit this step (never one whose confidence is -inf)."""
    masked = masked & (conf > -math.inf)
    masked_left = masked.sum(-1)
    floor = commit_count_floor(masked_left, steps_left).clamp_min(1)
    cap = masked_left if settings.max_per_step is None else masked_left.clamp_max(settings.max_per_step)
    above = (conf >= settings.threshold) & masked
    want = torch.maximum(above.sum(-1), floor)
    want = torch.minimum(want, cap).clamp_min(torch.minimum(masked_left, torch.ones_like(masked_left)))
    key = conf
    if settings.floor_from_left:
        # Confident positions first (by confidence), then the step floor fills the leftmost
        # undecided ones: unsure guesses scattered over a slot repeat each other ("_to_to_to"),
        # guesses made left to right read what came before them.
        index = torch.arange(conf.shape[1], device=conf.device).expand_as(conf)
        key = torch.where(above, 2 + conf, torch.where(masked, 1 - index / conf.shape[1], -math.inf))
    order = key.argsort(dim=-1, descending=True)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(conf.shape[1], device=conf.device).expand_as(order))
    return masked & (rank < want[:, None])


def collapse_after_pad(span, masked, commit, conf, slot_of, end_ids, pad_fill, threshold, n_slots=None):
    """A pad committed with confidence >= threshold ends its slot: later positions become pad."""
    is_end = torch.isin(span, end_ids) & ~masked
    confident_end = is_end & commit & (conf >= threshold)
    if n_slots is None:
        n_slots = int(slot_of.max()) + 1
    index, first_end = first_in_slot(confident_end, slot_of, n_slots)
    after = index > first_end
    span = torch.where(after, torch.full_like(span, pad_fill), span)
    return span, masked & ~after

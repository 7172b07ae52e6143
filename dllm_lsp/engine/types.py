"""Plain data passed between the span planner, the engine and the server."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, NamedTuple


@dataclass(frozen=True)
class Slot:
    """One masked hole in the canvas: at most `max_tokens` tokens, right-padded by the model."""

    max_tokens: int
    single_line: bool = False
    # The text the slot's content must begin with: the partial word typed before the cursor,
    # which the prefix leaves out (engine/span_starts.py). "" for none.
    starts_with: str = ""
    # The piece before the slot may give its last token back to the slot when it is punctuation
    # the tokenizer joins to what follows (`(` of `("`; engine/token_healing.py).
    heal_before: bool = False


@dataclass
class InfillRequest:
    """Text pieces interleaved with slots: pieces[0] slot[0] pieces[1] ... slot[n-1] pieces[n].

    A plain cursor completion has one slot, so pieces == [prefix, suffix].
    """

    pieces: list[str]
    slots: list[Slot]
    # The canonical language name (planner: LanguageFacts.name): where a slot may end depends on
    # its brackets and string delimiters (engine/span_ends.py). None: no such rule.
    language: str | None = None

    def __post_init__(self) -> None:
        if len(self.pieces) != len(self.slots) + 1:
            raise ValueError("an infill request needs exactly one more text piece than slots")
        if not self.slots:
            raise ValueError("an infill request needs at least one slot")
        for slot in self.slots:
            if slot.max_tokens < 1:
                raise ValueError("a slot must allow at least one token")

    @classmethod
    def single(cls, prefix: str, suffix: str, max_tokens: int, single_line: bool = False,
               language: str | None = None, starts_with: str = "", heal_before: bool = False) -> "InfillRequest":
        return cls([prefix, suffix], [Slot(max_tokens, single_line, starts_with, heal_before)], language)

    def with_lf_line_ends(self) -> InfillRequest:
        """The request with every line break a LF (`\r\n` and a lone `\r` alike)."""
        if not any("\r" in piece for piece in self.pieces):
            return self
        return replace(self, pieces=[piece.replace("\r\n", "\n").replace("\r", "\n") for piece in self.pieces])

    @property
    def prefix(self) -> str:
        return self.pieces[0]

    @property
    def suffix(self) -> str:
        return self.pieces[-1]


ConfidenceKind = Literal["prob", "margin", "entropy"]
CONFIDENCE_KINDS = ("prob", "margin", "entropy")
CACHE_MODES = ("dual", "reuse", "none")


@dataclass(frozen=True)
class CacheSettings:
    """How a bidirectional checkpoint caches its context during one request (the embedded
    model's cache is exact and ignores this). "dual": Fast-dLLM's dual cache, the context
    keys/values of a full pass reused by later steps; "reuse": the dual cache, and the context
    kept across requests (checkpoints/context_store.py: typing recomputes only what changed);
    "none": a full pass every step (exact)."""

    @property
    def keeps_context(self) -> bool:
        """Whether steps after a full pass reuse its context keys/values."""
        return self.mode != "none"

    mode: str = "dual"
    refresh_every: int = 0      # full pass every N steps; 0: only at the first step (Fast-dLLM within one block)

    def __post_init__(self) -> None:
        if self.mode not in CACHE_MODES:
            raise ValueError(f"cache mode must be one of {CACHE_MODES}, not {self.mode!r}")
        if self.refresh_every < 0:
            raise ValueError("refresh_every must be >= 0")


@dataclass(frozen=True)
class DecodeSettings:
    """How the denoising loop commits tokens. Greedy by default so completions are reproducible."""

    steps: int = 16                     # upper bound on denoising steps (forward passes): the options schema's
    threshold: float = 0.9              # commit every masked position at least this confident
    confidence: ConfidenceKind = "prob"
    max_per_step: int | None = None     # cap on commits per step (None: no cap)
    temperature: float = 0.0            # 0: greedy; >0: Gumbel-max sampling
    n: int = 1                          # candidates decoded together in one batch
    greedy_first: bool = False          # with temperature > 0: candidate 0 greedy, the others sampled (alternatives)
    seed: int = 0
    pad_collapse_threshold: float = 0.5  # a pad committed this confidently ends its slot
    remask_below: float | None = None   # re-open committed tokens whose confidence fell below this
    ends_in_order: bool = True          # only a slot's first undecided position may become its end (pad)
    floor_from_left: bool = True        # commits beyond the confident ones go to the leftmost undecided positions
    # With ends in order: a slot ends only where it has closed the brackets, strings and comments
    # it opened (engine/span_ends.py; requests that name a language with a lexicon). Off by
    # default: measured on the CPU preview it costs steps and gains nothing (docs/eval.md).
    ends_balanced: bool = False
    # A slot starts this many tokens wide (at most its max_tokens) and doubles each time the model
    # fills it with real tokens, up to max_tokens; each growth gets a fresh `steps` budget. 0: full
    # width from the first step; None: the default, GROWING_SLOT_START on every device (measured
    # on a CPU and on an H200: docs/serving.md#slots-that-grow). Masked-diffusion loop only
    # (engine/denoise.py says why).
    slot_start_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError("steps must be >= 1")
        if not 0.0 <= self.threshold <= 1.0 and self.confidence == "prob":
            raise ValueError("threshold must be within [0, 1]")
        if self.n < 1:
            raise ValueError("n must be >= 1")
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if self.confidence not in CONFIDENCE_KINDS:
            raise ValueError(f"confidence must be one of {CONFIDENCE_KINDS}, not {self.confidence!r}")
        if self.remask_below is not None and self.confidence == "prob" and not 0.0 <= self.remask_below <= 1.0:
            raise ValueError("remask_below must be within [0, 1] for prob confidences")
        if self.slot_start_tokens is not None and self.slot_start_tokens < 0:
            raise ValueError("slot_start_tokens must be >= 0 (0: full width; None: the default)")


GROWING_SLOT_START = 16    # where a growing slot starts by default (HumanEval single lines: 85% fit in 15 tokens)


@dataclass
class StepState:
    """The canvas after one denoising step, as shown to a streaming client."""

    step: int
    total_steps: int
    slot_texts: list[list[str]]          # [candidate][slot]; still-masked positions left out
    mean_confidence: float
    masked_left: int


class TokenConfidence(NamedTuple):
    """One token of a slot's text: where it ends in the slot's decoded text (characters, each
    token decoded alone, so a character split over two tokens is counted approximately) and the
    confidence it was committed with (the settings' kind: probability, margin or negative
    entropy; a token the step budget's last greedy fill decided, its score in that fill)."""

    end: int
    confidence: float


@dataclass
class InfillResult:
    candidates: list[list[str]]          # [candidate][slot] decoded text, pads stripped
    steps: int                           # forward passes actually run
    tokens_committed: int                # real (non-pad) tokens in candidate 0
    latency_ms: float
    slot_widths: tuple[int, ...] = ()    # each slot's width when decoding ended (slots may grow)
    # [candidate][slot] each slot's tokens with their commit confidences (what a confidence gate
    # reads, pipeline.Completion.confidence); None where the decoding records none (DreamOn's
    # variable-length loop).
    confidences: list[list[list[TokenConfidence]]] | None = None

    @property
    def text(self) -> str:
        """The first candidate's first slot: what a single-cursor completion shows."""
        return self.candidates[0][0]

"""Remasking (`remask_below`) and the margin / entropy confidences: the decode options that the
server settings and the eval flags expose, on scripted models whose behaviour is known."""
from __future__ import annotations

import torch

from dllm_lsp.engine.denoise import confidence_of, denoise
from dllm_lsp.engine.denoiser import Canvas

from .test_denoise_loop import MASK, VOCAB, A, B, C, ScriptedDenoiser
from dllm_lsp.engine.types import DecodeSettings


def dist(top: int, p: float, second: int | None = None, q: float = 0.0) -> torch.Tensor:
    """Log-probabilities: `top` at p, optionally `second` at q, the rest shared evenly."""
    probs = torch.zeros(VOCAB)
    probs[top] = p
    if second is not None:
        probs[second] = q
    rest = [t for t in range(VOCAB) if t not in (top, second) and t != MASK]
    probs[rest] = (1 - probs.sum()) / len(rest)
    probs[MASK] = 1e-9
    return probs.log()


class PerCallDenoiser(ScriptedDenoiser):
    """Call k of the session returns rows[k] (the last one again after that)."""

    def __init__(self, rows: list[list[torch.Tensor]]) -> None:
        super().__init__([], [])
        self.rows = rows

    def session(self, canvas, batch, cache=None):
        outer = self

        class Session:
            def logits(self, ids, wanted=None):
                step = outer.rows[min(outer.calls, len(outer.rows) - 1)]
                outer.calls += 1
                out = torch.stack(step)[None].repeat(ids.shape[0], 1, 1)
                return out if wanted is None else out[wanted]

        return Session()


def canvas_of(width: int) -> Canvas:
    return Canvas(torch.tensor([A] + [MASK] * width + [B]), [(1, 1 + width)])


def remask_model() -> PerCallDenoiser:
    # Step 1: only position 0 is confident; the step floor also commits position 1, a weak guess C.
    # Later steps: position 1 is clearly B (the model changed its mind once more was decided).
    first = [dist(A, 0.95), dist(C, 0.3), dist(A, 0.4), dist(A, 0.4)]
    later = [dist(A, 0.95), dist(B, 0.95), dist(A, 0.95), dist(A, 0.95)]
    return PerCallDenoiser([first, later])


def test_without_remasking_a_weak_guess_stays():
    outcome = denoise(remask_model(), canvas_of(4), DecodeSettings(steps=3, threshold=0.9))
    assert outcome.span_ids[0].tolist() == [A, C, A, A]
    assert outcome.steps == 2


def test_remasking_reopens_a_weak_guess_and_the_model_revises_it():
    settings = DecodeSettings(steps=3, threshold=0.9, remask_below=0.5)
    outcome = denoise(remask_model(), canvas_of(4), settings)
    assert outcome.span_ids[0].tolist() == [A, B, A, A]
    assert outcome.steps == 3          # the revision costs a step, within the budget


def test_remasking_never_reopens_at_the_last_step():
    settings = DecodeSettings(steps=2, threshold=0.9, remask_below=0.5)
    outcome = denoise(remask_model(), canvas_of(4), settings)
    assert MASK not in outcome.span_ids[0].tolist() and outcome.steps <= 2


def first_commit(settings: DecodeSettings, rows: list[torch.Tensor]) -> list[int]:
    """Which span positions the first step commits."""
    committed = []

    def on_step(step, span, masked, conf, budget):
        if step == 1:
            committed.extend(i for i, m in enumerate(masked[0].tolist()) if not m)

    denoise(PerCallDenoiser([rows]), canvas_of(len(rows)), settings, on_step=on_step)
    return committed


def test_margin_and_probability_rank_positions_differently():
    # Position 0: top-1 0.50 but a close second (margin 0.05); position 1: top-1 0.40, margin 0.35.
    rows = [dist(A, 0.50, B, 0.45), dist(C, 0.40, B, 0.05)]
    base = dict(steps=2, threshold=1.0, floor_from_left=False)   # the floor commits the most confident one
    assert first_commit(DecodeSettings(**base, confidence="prob"), rows) == [0]
    assert first_commit(DecodeSettings(**base, confidence="margin"), rows) == [1]


def test_entropy_prefers_a_peaked_distribution():
    # Same top-1 probability; position 1 spreads the rest over one token (lower entropy).
    rows = [dist(A, 0.5), dist(C, 0.5, B, 0.5)]
    base = dict(steps=2, threshold=1.0, floor_from_left=False)
    assert first_commit(DecodeSettings(**base, confidence="entropy"), rows) == [1]


def test_confidence_kinds_are_what_they_say():
    prob, margin, entropy = torch.tensor([0.5]), torch.tensor([0.25]), torch.tensor([2.0])
    assert confidence_of("prob", prob, margin, entropy).item() == 0.5
    assert confidence_of("margin", prob, margin, entropy).item() == 0.25
    assert confidence_of("entropy", prob, margin, entropy).item() == -2.0

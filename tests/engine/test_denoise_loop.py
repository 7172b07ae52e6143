"""The denoising loop's commit rules, driven by a denoiser whose logits the test writes.

The loop logic (threshold, step floor, pad collapse) is checked against exact expectations;
the real models are exercised in test_engine.py.
"""
from __future__ import annotations

import torch
from tokenizers import Tokenizer, models

from dllm_lsp.engine.denoise import choose_commits, collapse_after_pad, denoise, hold_back_early_ends
from dllm_lsp.engine.denoiser import Canvas, Denoiser, SpecialTokens
from dllm_lsp.engine.types import DecodeSettings

MASK, PAD, A, B, C = 0, 1, 2, 3, 4
VOCAB = 5


class ScriptedDenoiser(Denoiser):
    """Logits that put `script[s]` on top at span position s, with confidence `conf[s]`."""

    family = "scripted"
    name = "scripted"

    def __init__(self, script: list[int], conf: list[float]) -> None:
        self.tokenizer = Tokenizer(models.WordLevel({"<mask>": 0, "<pad>": 1, "a": 2, "b": 3, "c": 4}, unk_token="<mask>"))
        self.special = SpecialTokens(mask_id=MASK, pad_id=PAD)
        self.device = torch.device("cpu")
        self.max_context = 64
        self.script, self.conf = script, conf
        self.calls = 0

    def session(self, canvas, batch, cache=None):
        outer = self

        class Session:
            def logits(self, ids, wanted=None):
                outer.calls += 1
                rows = []
                for token, p in zip(outer.script, outer.conf):
                    other = (1 - p) / (VOCAB - 1)
                    probs = torch.full((VOCAB,), other)
                    probs[token] = p
                    rows.append(probs.log())
                out = torch.stack(rows)[None].repeat(ids.shape[0], 1, 1)
                return out if wanted is None else out[wanted]

        return Session()


def canvas_of(width: int) -> Canvas:
    return Canvas(torch.tensor([A] + [MASK] * width + [B]), [(1, 1 + width)])


def test_confident_pad_collapses_the_rest_of_the_slot():
    # Position 3 is a confident pad; positions 4.. are uncertain junk that must never appear.
    script = [A, B, C, PAD, C, C, C, C]
    conf = [0.99, 0.98, 0.97, 0.96, 0.3, 0.3, 0.3, 0.3]
    denoiser = ScriptedDenoiser(script, conf)
    outcome = denoise(denoiser, canvas_of(8), DecodeSettings(steps=8, threshold=0.9))
    assert outcome.span_ids[0].tolist() == [A, B, C, PAD, PAD, PAD, PAD, PAD]
    assert outcome.steps == 1   # everything decided in one pass: early exit


def test_unconfident_pad_does_not_end_the_slot_when_ends_may_come_early():
    script = [A, PAD, B, C]
    conf = [0.99, 0.4, 0.95, 0.95]
    settings = DecodeSettings(steps=4, threshold=0.9, ends_in_order=False)
    outcome = denoise(ScriptedDenoiser(script, conf), canvas_of(4), settings)
    assert outcome.span_ids[0].tolist() == [A, PAD, B, C]


class CreepingDenoiser(ScriptedDenoiser):
    """What a small model does with unknown length: it is sure of the pads at the slot's far
    end, and a decided pad makes the position before it look like a pad too."""

    def __init__(self, content_len: int) -> None:
        super().__init__([], [])
        self.content_len = content_len

    def session(self, canvas, batch, cache=None):
        outer = self
        start, end = canvas.slot_ranges[0]

        class Session:
            def logits(self, ids, wanted=None):
                span = ids[0, start:end].tolist()
                rows = []
                for p in range(len(span)):
                    pad_after = any(t == PAD for t in span[p + 1:])
                    token, conf = (PAD, 0.95) if p >= outer.content_len or pad_after else (A, 0.6)
                    probs = torch.full((VOCAB,), (1 - conf) / (VOCAB - 1))
                    probs[token] = conf
                    rows.append(probs.log())
                out = torch.stack(rows)[None].repeat(ids.shape[0], 1, 1)
                return out if wanted is None else out[wanted]

        return Session()


def test_ends_in_order_stop_pads_creeping_over_the_content():
    width, steps = 8, 8
    creeping = denoise(CreepingDenoiser(4), canvas_of(width), DecodeSettings(steps=steps, ends_in_order=False))
    assert creeping.span_ids[0].tolist().count(A) < 4          # the pads ate into the span
    in_order = denoise(CreepingDenoiser(4), canvas_of(width), DecodeSettings(steps=steps))
    assert in_order.span_ids[0].tolist() == [A, A, A, A, PAD, PAD, PAD, PAD]
    assert in_order.steps <= steps


def test_a_confident_end_right_after_this_steps_commits_closes_the_slot_in_the_same_step():
    # Same script as the collapse test: the pad at 3 is in order once 0-2 commit in this step.
    script = [A, B, C, PAD, C, C, C, C]
    conf = [0.99, 0.98, 0.97, 0.96, 0.3, 0.3, 0.3, 0.3]
    outcome = denoise(ScriptedDenoiser(script, conf), canvas_of(8), DecodeSettings(steps=8, threshold=0.9))
    assert outcome.span_ids[0].tolist() == [A, B, C, PAD, PAD, PAD, PAD, PAD] and outcome.steps == 1


def test_end_proposals_before_undecided_content_are_held_back():
    conf = torch.tensor([[0.5, 0.5, 0.99, float("-inf"), 0.75, 0.99]])   # decided positions are -inf already
    proposal = torch.tensor([[A, PAD, PAD, PAD, B, PAD]])
    masked = torch.tensor([[True, True, True, False, True, True]])
    slot_of = torch.tensor([0, 0, 0, 1, 1, 1])
    held = hold_back_early_ends(conf, proposal, masked, slot_of, torch.tensor([PAD]), 2)
    # slot 0: first undecided is 0, so pads at 1, 2 wait; slot 1: first undecided is 4 (B), so 5 waits.
    assert held[0].tolist() == [0.5, float("-inf"), float("-inf"), float("-inf"), 0.75, float("-inf")]


def test_step_floor_commits_enough_to_finish_in_budget():
    conf = torch.tensor([[0.1, 0.5, 0.2, 0.4, 0.3, 0.6]])
    masked = torch.ones(1, 6, dtype=torch.bool)
    by_confidence = DecodeSettings(steps=3, threshold=0.9, floor_from_left=False)
    commit = choose_commits(conf, masked, by_confidence, steps_left=3)
    assert commit[0].tolist() == [False, True, False, False, False, True]   # ceil(6/3) = 2, most confident
    commit = choose_commits(conf, masked, DecodeSettings(steps=3, threshold=0.9), steps_left=3)
    assert commit[0].tolist() == [True, True, False, False, False, False]   # ceil(6/3) = 2, leftmost


def test_confident_positions_come_first_and_the_floor_fills_from_the_left():
    conf = torch.tensor([[0.1, 0.5, 0.95, 0.4, 0.99, 0.6, float("-inf")]])
    masked = torch.tensor([[True, True, True, False, True, True, True]])
    commit = choose_commits(conf, masked, DecodeSettings(steps=2, threshold=0.9), steps_left=2)
    # 5 undecided and eligible, 2 steps left: floor 3 = the two confident ones + the leftmost other.
    assert commit[0].tolist() == [True, False, True, False, True, False, False]


def test_threshold_commits_all_confident_positions_up_to_the_cap():
    conf = torch.tensor([[0.95, 0.99, 0.2, 0.97]])
    masked = torch.ones(1, 4, dtype=torch.bool)
    commit = choose_commits(conf, masked, DecodeSettings(steps=8, threshold=0.9), steps_left=8)
    assert commit[0].tolist() == [True, True, False, True]
    capped = choose_commits(conf, masked, DecodeSettings(steps=8, threshold=0.9, max_per_step=2), steps_left=8)
    assert capped[0].tolist() == [False, True, False, True]


def test_collapse_is_per_slot():
    span = torch.tensor([[A, PAD, MASK, B, C, MASK]])
    masked = torch.tensor([[False, False, True, False, False, True]])
    commit = torch.tensor([[False, True, False, False, False, False]])
    conf = torch.tensor([[0.0, 0.9, 0.0, 0.0, 0.0, 0.0]])
    slot_of = torch.tensor([0, 0, 0, 1, 1, 1])
    new_span, new_masked = collapse_after_pad(span, masked, commit, conf, slot_of, torch.tensor([PAD]), PAD, 0.5)
    assert new_span[0].tolist() == [A, PAD, PAD, B, C, MASK]
    assert new_masked[0].tolist() == [False, False, False, False, False, True]

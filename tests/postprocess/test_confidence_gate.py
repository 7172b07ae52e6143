"""The confidence gate (`minConfidence`): which of the model's tokens a shown completion was made
of (pipeline.shown_confidence), and the pipeline showing nothing below the gate; and the
alternatives (`alternatives`): the other candidates post-processing and the gate let through.
Real planner, real tree-sitter, real post-processing; the model's result written by the test."""
from __future__ import annotations

import pytest

from dllm_lsp.engine.types import InfillResult, TokenConfidence
from dllm_lsp.multisite.companion import CompanionSlot
from dllm_lsp.options import Options
from dllm_lsp.pipeline import plan, shown_confidence
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"


def tokens(*pieces: tuple[str, float]) -> tuple[str, list[TokenConfidence]]:
    """(the slot's text, its tokens) from (token text, confidence) pairs."""
    out, end = [], 0
    for text, confidence in pieces:
        end += len(text)
        out.append(TokenConfidence(end, confidence))
    return "".join(text for text, _ in pieces), out


def test_a_lines_junk_after_its_newline_is_not_the_completions():
    slot, toks = tokens(("x", 0.9), (" +", 0.8), (" 1", 0.7), ("\n", 0.1), ("foo", 0.05), (" bar", 0.05))
    confidence = shown_confidence("x + 1", slot, toks)
    assert (confidence.tokens, confidence.least) == (3, 0.7)
    assert confidence.mean == pytest.approx(0.8)


def test_reindented_blocks_are_matched_by_their_non_blank_characters():
    slot, toks = tokens(("  if", 0.6), (" a", 0.6), (":", 0.9), ("\n", 0.9), ("      ", 0.9), ("b", 0.3))
    confidence = shown_confidence("if a:\n        b", slot, toks)        # healed, then re-based deeper
    assert confidence.tokens == 6 and confidence.least == 0.3


def test_a_trimmed_closer_is_not_counted():
    slot, toks = tokens(("foo", 0.9), ("(", 0.9), ("a", 0.8), (")", 0.8), (")", 0.01))
    assert shown_confidence("foo(a)", slot, toks).least == 0.8


def test_nothing_shown_or_nothing_recorded_has_no_confidence():
    slot, toks = tokens(("x", 0.9))
    assert shown_confidence("", slot, toks) is None
    assert shown_confidence("x", slot, []) is None


def planned(source: str, **options):
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    return plan(Snapshot.parse(text, "python"), cursor, Options().merged(options))


def result_of(*candidates: tuple[str, float], recorded: bool = True) -> InfillResult:
    """A result whose candidates' cursor slots are each one token (text, confidence)."""
    return InfillResult([[text] for text, _ in candidates], steps=1, tokens_committed=1, latency_ms=0.0,
                        confidences=[[[TokenConfidence(len(text), confidence)]] for text, confidence in candidates]
                        if recorded else None)


def test_the_pipeline_shows_nothing_below_the_gate():
    gated = planned("total = ‸\n", minConfidence=0.5)
    assert gated.finish(result_of((" 42", 0.2))) is None
    held_back = gated.finish(result_of((" 42", 0.2)), gate=False)
    assert held_back.text == "42" and held_back.confidence.mean == pytest.approx(0.2)
    assert gated.finish(result_of((" 42", 0.6))).text == "42"


def test_without_a_gate_or_without_confidences_everything_post_processing_allows_is_shown():
    assert planned("total = ‸\n").finish(result_of((" 42", 0.01))).confidence.mean == pytest.approx(0.01)
    shown = planned("total = ‸\n", minConfidence=0.5).finish(result_of((" 42", 0.01), recorded=False))
    assert shown.text == "42" and shown.confidence is None


def test_the_companion_slot_s_confidences_leave_with_it():
    both = InfillResult([["import os", "x"]], steps=1, tokens_committed=2, latency_ms=0.0,
                        confidences=[[[TokenConfidence(9, 0.1)], [TokenConfidence(1, 0.9)]]])
    main = CompanionSlot(0, None).main_result(both)
    assert main.confidences == [[[TokenConfidence(1, 0.9)]]]


def test_alternatives_are_the_other_candidates_that_post_processing_and_the_gate_let_through():
    result = result_of((" 42", 0.9), (" 42", 0.9), (" 7", 0.8), (" )(", 0.9), (" 8", 0.1), (" total * 2", 0.7))
    found = planned("total = ‸\n", alternatives=6, minConfidence=0.5).finish(result)
    # a duplicate of the first, a line that does not parse and one below the gate are left out
    assert found.text == "42" and [a.text for a in found.alternatives] == ["7", "total * 2"]
    assert [a.confidence.mean for a in found.alternatives] == pytest.approx([0.8, 0.7])
    assert all((a.start, a.end, a.snapshot) == (found.start, found.end, found.snapshot) for a in found.alternatives)
    moved = found.moved(found.start + 1, found.end + 1, found.snapshot)
    assert moved.alternatives == () and moved.text == "42"


def test_no_first_completion_no_alternatives():
    found = planned("total = ‸\n", alternatives=3).finish(result_of((" )(", 0.9), (" 7", 0.9), (" 8", 0.9)))
    assert found is None


def test_alternatives_and_their_temperature_reach_the_decode_settings():
    settings = Options().merged({"alternatives": 4, "temperature": 0.5}).decode.decode_settings()
    assert (settings.n, settings.temperature, settings.greedy_first) == (4, 0.5, True)
    single = Options().decode.decode_settings()
    assert (single.n, single.temperature, single.greedy_first) == (1, 0.0, False)

"""Alternatives (several candidates, `DecodeSettings.n`) in the variable-length (DreamOn) and
block-wise loops: the first candidate's text is the one it has alone, and the others cost it
little (test_alternatives_passes.py holds the fixed-length loop to the same).

- Variable-length (variable_length.py): candidates run one after another, each in its own layout;
  the alternatives share the model calls the first took. Before, each ran a whole decode: four
  candidates took four times the first's calls (32 against 8 in this file's tiny DreamOn test,
  run on the old loop).
- Block-wise (blockwise.py): the first candidate's blocks and span decide when the batch moves
  on and ends; only the last slot has alternatives. Before, a block's steps ran until every
  candidate had decided it, the blocks went on until every candidate's span had ended, and a
  later slot was decoded once per candidate (56 calls against 20 in the tiny SDAR test of two
  slots).

Scripted models make each step's outcome, so each count, known exactly; the tiny random
checkpoints show the same on real models. A model call is counted where the loop asks for it
(`drive`): one forward pass each, the step scheduler's request step.
"""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from tokenizers import Tokenizer, models

from dllm_lsp.checkpoints.block_tiny import write_tiny_block_checkpoint
from dllm_lsp.checkpoints.tiny import write_tiny_checkpoint
from dllm_lsp.engine.blockwise import BlockwiseRun
from dllm_lsp.engine.denoiser import Canvas, Denoiser, SpecialTokens
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, Slot
from dllm_lsp.engine.variable_length import INITIAL_MASKS, VariableLengthRun
from dllm_lsp.loader import load_model

MASK, END, CTX, EXPAND = 0, 1, 2, 3
VOCAB = 64             # tokens 4.. are "words"
ALTERNATIVES = DecodeSettings(n=4, temperature=2.0, greedy_first=True)     # the server's, hotter


def words(n: int, first: int = 4) -> list[int]:
    return list(range(first, first + n))


def drive(run) -> tuple[int, object]:
    """Run to the end with its own model calls -> (the calls, the outcome)."""
    calls = 0
    while run.wants_logits():
        run.advance(run.session.logits(run.ids, run.rows()))
        calls += 1
    return calls, run.outcome()


def word_level_tokenizer() -> Tokenizer:
    vocab = {"<mask>": MASK, "<end>": END, "ctx": CTX, "<expand>": EXPAND,
             **{f"w{i}": i for i in range(4, VOCAB)}}
    return Tokenizer(models.WordLevel(vocab, unk_token="<mask>"))


def scores(token: int, sure: float) -> torch.Tensor:
    """Log-probabilities [VOCAB]: `token` at `sure`, the rest spread evenly."""
    probs = torch.full((VOCAB,), (1 - sure) / (VOCAB - 1))
    probs[token] = sure
    return probs.log()


# -- variable-length ----------------------------------------------------------------------------

class ScriptedDreamOn(Denoiser):
    """A variable-length model (it has an expand token) that proposes word 4 + j at span position
    j with probability `sure`, never an expand or a delete: the layout never changes, so a
    candidate with a budget of s steps takes exactly min(s, ...) calls, as its commits say."""

    family = "scripted"
    name = "scripted-dreamon"

    def __init__(self, sure: float) -> None:
        self.tokenizer = word_level_tokenizer()
        self.special = SpecialTokens(mask_id=MASK, eos_id=END, expand_id=EXPAND)
        self.device = torch.device("cpu")
        self.max_context = 256
        self.sure = sure

    def session(self, canvas, batch, cache=None):
        sure = self.sure
        widths = canvas.widths

        class Session:
            def logits(self, ids, wanted=None):
                out = torch.stack([scores(4 + j, sure) for width in widths for j in range(width)])[None]
                return out if wanted is None else out[wanted]

        return Session()


def dreamon_canvas(width: int = 16) -> Canvas:
    return Canvas(torch.tensor([CTX] + [MASK] * width + [CTX]), [(1, 1 + width)])


def test_the_alternatives_share_the_calls_the_first_took():
    # Unsure proposals: each step commits the fewest its budget allows, so the first takes its
    # whole budget, 4 calls; the three alternatives get budgets of 1, 1 and 2 (a sampled delete
    # may end one sooner), each a call at least.
    denoiser, settings = ScriptedDreamOn(sure=0.5), DecodeSettings(steps=4)
    first, alone = drive(VariableLengthRun(denoiser, dreamon_canvas(), settings))
    calls, four = drive(VariableLengthRun(denoiser, dreamon_canvas(), replace(ALTERNATIVES, steps=4)))
    assert first == 4
    assert first + 3 <= calls <= 2 * first      # not 4 * first: the alternatives took what the first did
    assert four.steps == calls           # the outcome reports every call
    assert four.span_ids[0].tolist() == alone.span_ids[0].tolist() == words(INITIAL_MASKS)
    assert not (four.span_ids == MASK).any()                            # every candidate complete
    assert any(row != words(INITIAL_MASKS) for row in four.span_ids[1:].tolist())    # sampled


def test_a_first_candidate_done_in_one_call_leaves_each_alternative_one():
    denoiser = ScriptedDreamOn(sure=0.95)         # every mask committed at the first step
    first, _ = drive(VariableLengthRun(denoiser, dreamon_canvas(), DecodeSettings(steps=8)))
    calls, four = drive(VariableLengthRun(denoiser, dreamon_canvas(), replace(ALTERNATIVES, steps=8)))
    assert first == 1
    assert calls == first + 3
    assert not (four.span_ids == MASK).any()


@pytest.fixture(scope="module")
def dreamon(tmp_path_factory) -> Engine:
    folder = write_tiny_checkpoint(tmp_path_factory.mktemp("dreamon") / "dreamon", "dreamon", seed=3)
    engine = Engine(load_model(str(folder), "cpu"), batching=False)
    assert engine.denoiser.decoding == "variable_length"
    yield engine
    engine.close()


PREFIXES = ["def add(a, b):\n    return ", "import os\np = os.path.", "values = ["]


@pytest.mark.parametrize("threshold", [0.9, 1.0])
def test_the_tiny_dreamon_alternatives_keep_the_first_ones_text_within_its_calls(dreamon, threshold):
    denoiser, settings = dreamon.denoiser, DecodeSettings(steps=8, threshold=threshold)
    differ = 0
    for prefix in PREFIXES:
        canvas = dreamon.canvas(InfillRequest.single(prefix, "\n", 16))
        first, alone = drive(VariableLengthRun(denoiser, canvas, settings))
        calls, four = drive(VariableLengthRun(denoiser, canvas, replace(ALTERNATIVES, steps=8, threshold=threshold)))
        assert calls <= first + max(first, ALTERNATIVES.n - 1), (prefix, first, calls)
        texts = dreamon.decode_slots(four.canvas.widths, four.span_ids, None)
        assert texts[0] == dreamon.decode_slots(alone.canvas.widths, alone.span_ids, None)[0]
        assert not (four.span_ids == denoiser.special.mask_id).any()
        differ += any(text != texts[0] for text in texts[1:])
    assert differ                  # the alternatives are still sampled


# -- block-wise ---------------------------------------------------------------------------------

class ScriptedBlockPort:
    """A block-diffusion port of blocks of 4 that proposes, at span position j of candidate b,
    targets[b][j] (an end past the target), with probability sure[b]. Counts its calls."""

    block_size = 4
    sub_block_size = None

    def __init__(self, targets: list[list[int]], sure: list[float]) -> None:
        self.special = SpecialTokens(mask_id=MASK, pad_id=END)
        self.device = torch.device("cpu")
        self.targets, self.sure = targets, sure
        self.calls = 0
        self.t0 = 0

    def context_ids(self, prefix: list[int], suffix: list[int]) -> list[int]:
        context = [CTX, *prefix]          # the span starts at position 1: blocks 0-3, 4-7, ...
        self.t0 = len(context)
        return context

    def new_cache(self, batch: int):
        return None

    def block_logits(self, cache, ids, start, rows=None):
        self.calls += 1
        first = start + ids.shape[1] - self.block_size          # the current block's position
        out = torch.stack([
            torch.stack([scores(target[j] if 0 <= j < len(target) else END, sure)
                         for j in range(first - self.t0, first - self.t0 + self.block_size)])
            for target, sure in zip(self.targets, self.sure)])
        return out if rows is None else out[rows]

    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))


def block_canvas(width: int) -> Canvas:
    return Canvas(torch.tensor([MASK] * width + [CTX]), [(0, width)])


def span(outcome, row: int) -> list[int]:
    return outcome.span_ids[row].tolist()


def test_the_others_decide_a_block_in_the_pass_the_first_decides_it():
    # The first is sure of every token (a block a pass); the second unsure (a token a step): the
    # batch took a step per token of its, 12 calls for 4 blocks; now what it left in a block takes
    # the tokens the first's last pass there proposed.
    targets, settings = [words(12), words(12, first=30)], DecodeSettings(steps=4, threshold=0.9)
    alone = ScriptedBlockPort(targets[:1], [0.95])
    first, one = drive(BlockwiseRun(alone, block_canvas(12), settings))
    both = ScriptedBlockPort(targets, [0.95, 0.35])
    calls, two = drive(BlockwiseRun(both, block_canvas(12), replace(settings, n=2)))
    assert first == alone.calls == 4
    assert calls == both.calls == first
    assert span(two, 0) == span(one, 0) == words(12)
    assert span(two, 1) == words(12, first=30)           # every position decided


def test_the_others_end_where_the_first_does():
    # The first ends after 3 tokens (in its second block); the second, as sure, goes on to 10:
    # its third block took a call more; now it ends with the first's span, at that block.
    targets, settings = [words(3), words(10, first=30)], DecodeSettings(steps=4, threshold=0.9)
    alone = ScriptedBlockPort(targets[:1], [0.95])
    first, one = drive(BlockwiseRun(alone, block_canvas(12), settings))
    both = ScriptedBlockPort(targets, [0.95, 0.95])
    calls, two = drive(BlockwiseRun(both, block_canvas(12), replace(settings, n=2)))
    assert first == 2
    assert calls == first
    assert span(two, 0) == span(one, 0) == words(3) + [END] * 9
    assert span(two, 1) == words(7, first=30) + [END] * 5     # cut after the first's last block


def test_a_sampled_alternative_follows_the_first_too():
    targets = [words(12), words(12, first=30), words(12, first=40)]
    alone = ScriptedBlockPort(targets[:1], [0.95])
    first, one = drive(BlockwiseRun(alone, block_canvas(12), DecodeSettings(steps=4)))
    port = ScriptedBlockPort(targets, [0.95, 0.35, 0.35])
    calls, three = drive(BlockwiseRun(port, block_canvas(12), replace(ALTERNATIVES, n=3, steps=4)))
    assert calls == first
    assert span(three, 0) == span(one, 0)
    assert not (three.span_ids == MASK).any()


@pytest.fixture(scope="module")
def blocks(tmp_path_factory) -> dict[str, Engine]:
    root = tmp_path_factory.mktemp("blocks")
    engines = {layout: Engine(load_model(str(write_tiny_block_checkpoint(root / layout, layout)), "cpu"),
                              batching=False)
               for layout in ("sdar", "fast-dllm-v2")}      # blocks of 4; and sub-blocks of 2
    yield engines
    for engine in engines.values():
        engine.close()


REQUESTS = {
    "one slot": InfillRequest.single("def add(a, b):\n    return ", "\n", 16),
    "two slots": InfillRequest(["import os\n", "\ndef f(x):\n    return ", "\n"], [Slot(8), Slot(12)]),
}


@pytest.mark.parametrize("layout", ["sdar", "fast-dllm-v2"])
@pytest.mark.parametrize("name", list(REQUESTS))
def test_the_tiny_block_alternatives_keep_the_first_ones_calls_and_text(blocks, layout, name):
    engine = blocks[layout]
    port, canvas, settings = engine.denoiser, engine.canvas(REQUESTS[name]), DecodeSettings(steps=4)
    first, alone = drive(BlockwiseRun(port, canvas, settings))
    calls, four = drive(BlockwiseRun(port, canvas, replace(ALTERNATIVES, steps=4)))
    assert calls == first                 # was 56 against 20 for two slots (a later slot per candidate)
    assert four.steps == calls
    texts = engine.decode_slots(four.canvas.widths, four.span_ids, None)
    assert texts[0] == engine.decode_slots(alone.canvas.widths, alone.span_ids, None)[0]
    assert not (four.span_ids == port.special.mask_id).any()
    assert any(text[-1] != texts[0][-1] for text in texts[1:])           # sampled
    # Only the last slot varies: the ones before it are the first candidate's.
    assert all(text[:-1] == texts[0][:-1] for text in texts)

"""A slot that must begin with the word typed halfway (engine/span_starts.py): the token index
(which tokens agree with a text, for byte-level and SentencePiece-style tokenizers) and every
loop that applies the rule, driven by real tiny random models, which left alone would never
begin with the made-up words asked of them."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from dllm_lsp.checkpoints.block_tiny import write_tiny_block_checkpoint
from dllm_lsp.checkpoints.tiny import write_tiny_checkpoint
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.span_starts import SpanStarts, StartGate, TokenIndex, goes_on
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, Slot
from dllm_lsp.eval.tasks import load_tasks, resolve_data
from dllm_lsp.loader import load_model
from dllm_lsp.options import DecodeOptions, Options, PlannerOptions
from dllm_lsp.syntax.snapshot import Snapshot
from dllm_lsp import pipeline

PREFIX = "def area(width, height):\n    return"
SUFFIX = "\n\n\nprint(area(2, 3))\n"
START = " zqxj"   # no tiny model writes this unaided


def agrees(text: str, rest: str) -> bool:
    return bool(text) and (rest.startswith(text) or text.startswith(rest))


@pytest.fixture(scope="module")
def embedded(tiny_model_dir):
    return load_model(tiny_model_dir, "cpu")


def test_the_index_finds_exactly_the_agreeing_tokens(embedded):
    tokenizer = embedded.tokenizer
    index = TokenIndex.of(tokenizer, exclude=(embedded.special.mask_id, *embedded.special.end_ids))
    for rest in (" ret", " r", "return", " area(", "("):
        found = set(index.agreeing(rest))
        assert found, rest
        for token in range(tokenizer.get_vocab_size()):
            text = tokenizer.decode([token])
            if "\ufffd" in text or token in (embedded.special.mask_id, *embedded.special.end_ids):
                assert token not in found
            else:
                assert (token in found) == agrees(text, rest), (rest, token, text)
        mask = index.mask(rest, "cpu")
        assert mask.nonzero().flatten().tolist() == sorted(found)
        # What the gate asks of the host instead of the mask's .any(): a token below a vocabulary's end.
        assert index.agrees_below(rest, min(found) + 1, "cpu") and not index.agrees_below(rest, min(found), "cpu")
    assert index.agreeing("\u2603\u2603") == []     # nothing agrees with a character the vocabulary lacks
    assert not index.agrees_below("\u2603\u2603", tokenizer.get_vocab_size(), "cpu")
    # Typed blanks are followed by text in the token that finishes them: not the blank alone, no line break.
    followed = index.agreeing(" ", beyond=True)
    assert followed and all(tokenizer.decode([t])[1:].strip() for t in followed)
    assert set(followed) < set(index.agreeing(" "))


def test_the_index_keeps_the_space_a_sentencepiece_decoder_drops_at_the_start():
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(["return naive name nail " * 40],
                                  trainers.BpeTrainer(vocab_size=80, special_tokens=["<unk>", "<mask>"]))
    naive = tokenizer.token_to_id("▁naive")
    assert naive is not None and tokenizer.decode([naive]) == "naive"   # alone, the decoder drops the space
    index = TokenIndex.of(tokenizer)
    assert index.text(naive) == " naive"
    assert naive in index.agreeing(" nai") and naive not in index.agreeing("nai")
    assert index.text(tokenizer.token_to_id("<mask>")) == ""          # special tokens agree with nothing


@pytest.mark.parametrize("settings", [
    DecodeSettings(steps=4),
    DecodeSettings(steps=4, n=3, temperature=1.0, greedy_first=True),     # alternatives: every candidate
    DecodeSettings(steps=4, slot_start_tokens=4),                          # slots that grow
    DecodeSettings(steps=6, remask_below=0.99),                           # remasking leaves the start alone
    DecodeSettings(steps=1),                                               # the budget's greedy fill
], ids=["greedy", "alternatives", "growing", "remask", "one-step"])
def test_every_candidate_begins_with_the_typed_start(embedded, settings):
    request = InfillRequest.single(PREFIX, SUFFIX, 12, single_line=True, language="python", starts_with=START)
    for batching in (True, False):
        result = Engine(embedded, batching=batching).infill(request, settings)
        assert all(texts[0].startswith(START) for texts in result.candidates), result.candidates
    free = Engine(embedded).infill(InfillRequest.single(PREFIX, SUFFIX, 12, single_line=True), settings)
    assert not free.candidates[0][0].startswith(START)


def test_a_stream_never_reports_a_step_past_its_total(embedded):
    """A typed start is written a token a step past a one-step budget: the stream said 17 of 16."""
    request = InfillRequest.single(PREFIX, SUFFIX, 12, single_line=True, language="python", starts_with=START)
    states = []
    result = Engine(embedded, batching=False).infill(request, DecodeSettings(steps=1), on_step=states.append)
    assert result.steps > 1 and states[-1].step > 1
    assert all(s.step <= s.total_steps for s in states), [(s.step, s.total_steps) for s in states]


def test_typed_blanks_are_followed_by_text(embedded):
    """A start that ends in a blank (typed before the cursor, left out of the prefix) is followed
    by text on its line: never the blank alone, nor the blank and a line break."""
    request = InfillRequest.single(PREFIX, SUFFIX, 12, single_line=True, starts_with=" ")
    result = Engine(embedded).infill(request, DecodeSettings(steps=4, n=3, temperature=1.0, greedy_first=True))
    assert all(t[0].startswith(" ") and t[0].split("\n")[0].strip() for t in result.candidates), result.candidates


def test_each_slot_keeps_its_own_start(embedded):
    request = InfillRequest(pieces=["def f(a, b):\n    x =", "\n    y = ", "\n    return x + y\n"],
                            slots=[Slot(8, True, " qq"), Slot(8, True)])
    texts = Engine(embedded).infill(request, DecodeSettings(steps=4, n=2, temperature=1.0)).candidates
    assert all(t[0].startswith(" qq") for t in texts)
    assert all(not t[1].startswith(" qq") for t in texts)


def test_a_start_no_token_agrees_with_is_left_to_the_model(embedded):
    request = InfillRequest.single(PREFIX, SUFFIX, 8, single_line=True, starts_with=" \u2603")
    result = Engine(embedded).infill(request, DecodeSettings(steps=4))
    assert result.candidates and not result.candidates[0][0].startswith(" \u2603")


@pytest.mark.parametrize("layout", ["llada", "dream", "open-dcoder"])
def test_masked_diffusion_checkpoints_begin_with_it(tmp_path, layout):
    model = load_model(str(write_tiny_checkpoint(tmp_path / layout, layout, seed=1)), "cpu")
    request = InfillRequest.single(PREFIX, SUFFIX, 8, single_line=True, starts_with=START)
    result = Engine(model).infill(request, DecodeSettings(steps=4, n=2, temperature=0.8))
    assert all(texts[0].startswith(START) for texts in result.candidates), result.candidates


@pytest.mark.parametrize("layout", ["sdar", "fast-dllm-v2"])
def test_the_block_loop_begins_with_it(tmp_path, layout):
    model = load_model(str(write_tiny_block_checkpoint(tmp_path / layout, layout, seed=3)), "cpu")
    one = InfillRequest.single(PREFIX, SUFFIX, 8, single_line=True, starts_with=START)
    # Two slots, two candidates: the second slot is decoded candidate by candidate.
    two = InfillRequest(pieces=["def f(a, b):\n    x =", "\n    y =", "\n    return x + y\n"],
                        slots=[Slot(8, True), Slot(8, True, START)])
    for request, slot in ((one, 0), (two, 1)):
        for settings in (DecodeSettings(steps=4), DecodeSettings(steps=2, n=2, temperature=0.8)):
            result = Engine(model).infill(request, settings)
            assert all(texts[slot].startswith(START) for texts in result.candidates), result.candidates


@pytest.mark.parametrize("text, expected", [
    ("x =", True), ("a ==", True), ("n +=", True), ("s.", True), ("x -", True), ("f() ->", True),
    ("(a) =>", True), ("@", True),
    ("i++", False), ("i--", False), ("x = ...", False), ("/* c */", False), ("f(", False), ("a,", False),
    ("x = 1", False), ("x = ", False), ("", False),
])
def test_where_a_line_goes_on(text, expected):
    assert goes_on(text) is expected


def test_only_planner_made_slots_in_code_are_held_to_go_on(embedded):
    index = TokenIndex.of(embedded.tokenizer)

    def rule(language, heal_before, prefix="    depth +="):
        request = InfillRequest.single(prefix, "\n", 8, True, language, heal_before=heal_before)
        return SpanStarts.for_request(request, lambda: index)

    assert rule("python", True).going_on == (True,)
    assert rule("python", False) is None                           # raw text (the benchmark's modes)
    assert rule(None, True) is None                                # prose: a line may end after a full stop
    assert rule("python", True, "    x = 1") is None


def test_the_gate_keeps_ends_and_blanks_from_the_position_after_a_start_the_line_goes_on_after(embedded):
    """Logits that would end the slot at once (an end token, a blank) are refused at the position
    after the start, and only there; a slot with no start to write goes on from its first position."""
    index = TokenIndex.of(embedded.tokenizer, exclude=(embedded.special.mask_id, *embedded.special.end_ids))
    end, blank = embedded.special.end_ids[0], embedded.tokenizer.encode(" ").ids[0]
    dot = index.agreeing(".")[0]
    assert index.text(blank) == " " and index.text(dot) == "."
    on = index.going_on("cpu")
    assert not on[end] and not on[blank] and on[dot]
    for token in range(index.size):
        text = index.text(token)
        leading = text[:len(text) - len(text.lstrip())]
        assert bool(on[token]) == bool(text.strip() and "\n" not in leading), (token, text)

    def step(gate: StartGate, masked: list[bool]) -> torch.Tensor:
        flags = torch.tensor([masked])
        logits = torch.zeros(int(flags.sum()), index.size)
        logits[:, end] = 5.0
        logits[:, blank] = 4.0
        gate.restrict(logits, flags, flags, torch.zeros(4, dtype=torch.long), 1)
        return logits.argmax(-1)

    nothing_to_write = StartGate(SpanStarts(("",), index, (True,)), 1)
    assert step(nothing_to_write, [True] * 4).tolist()[1:] == [end] * 3        # only the first position
    assert step(nothing_to_write, [True] * 4)[0] not in (end, blank)
    assert step(nothing_to_write, [False, True, True, True]).tolist() == [end] * 3   # decided: the rule is done

    dot_first = StartGate(SpanStarts((".",), index, (True,)), 1)
    chosen = step(dot_first, [True] * 4)
    assert index.text(int(chosen[0])).startswith(".") and chosen[1] not in (end, blank) and chosen[2] == end
    dot_first.record(torch.tensor([[dot, end, end, end]]))
    assert step(dot_first, [False, True, True, True]).tolist()[1:] == [end] * 2
    assert step(dot_first, [False, True, True, True])[0] not in (end, blank)
    free = StartGate(SpanStarts((".",), index, (False,)), 1)
    assert step(free, [True] * 4)[1] == end


def test_the_shipped_model_writes_text_after_a_typed_operator():
    """`depth +=‸` and the like (HumanEval lines typed through their `=`): left free, the shipped
    model ended the line with a blank (nothing shown); held to go on, it writes text."""
    wanted = {"SingleLineInfilling/HumanEval/1/L6", "SingleLineInfilling/HumanEval/3/L3",
              "SingleLineInfilling/HumanEval/6/L5", "SingleLineInfilling/HumanEval/8/L4"}
    engine = Engine(load_model(None, "cpu"))
    settings = DecodeOptions(steps=16).decode_settings()
    for task in (t for t in load_tasks(resolve_data("single-line")) if t.task_id in wanted):
        document, cursor = task.in_editor(through="=")
        assert document[:cursor].endswith("=")
        texts = []
        for options in (Options(), Options(planner=PlannerOptions(heal_typed=False))):
            plan = replace(pipeline.plan(Snapshot.parse(document, "python"), cursor, options,
                                         model_context=engine.denoiser.max_context), decode=settings)
            texts.append(plan.run(engine).text)
        held, free = texts
        assert held.strip() and not held.startswith("\n") and not free.strip(), (task.task_id, held, free)

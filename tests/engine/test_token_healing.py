"""Token healing at the piece before a slot (engine/token_healing.py): which pieces give their
last token back (the shipped model's real tokenizer), how the texts come back, and the engine
wired to it with real tiny models of each loop."""
from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from dllm_lsp.checkpoints.block_tiny import write_tiny_block_checkpoint
from dllm_lsp.checkpoints.tiny import write_tiny_checkpoint
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.span_starts import TokenIndex
from dllm_lsp.engine.token_healing import Healing
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, Slot, TokenConfidence
from dllm_lsp.loader import load_model, resolve_model_path

SUFFIX = "\n\n\nprint(area(2, 3))\n"


@pytest.fixture(scope="module")
def shipped_tokens():
    tokenizer = Tokenizer.from_file(str(resolve_model_path(None, "cpu") / "tokenizer.json"))
    index = TokenIndex.of(tokenizer)
    return index, (lambda text: tokenizer.encode(text, add_special_tokens=False).ids)


def healed(tokens, prefix: str, starts_with: str = "", heal: bool = True) -> Healing | None:
    index, encode = tokens
    request = InfillRequest.single(prefix, SUFFIX, 8, single_line=True, starts_with=starts_with, heal_before=heal)
    return Healing.of(request, lambda: index, encode)


@pytest.mark.parametrize("prefix, head", [
    ("def f(name):\n    print(", "("),          # `("`, `()`, `((`, `([` are tokens
    ("def f(a, b):\n    if a =", " ="),       # ` ==` is one token: after ` =` the model never saw `=`
    ("def f(xs):\n    ys = xs[", "["),         # `[:`, `[-`, `[::`
    ("def f(s):\n    return s.", "."),         # `._`, `.__`
])
def test_punctuation_a_longer_token_begins_with_is_given_back(shipped_tokens, prefix, head):
    healing = healed(shipped_tokens, prefix)
    assert healing is not None and healing.heads == (head,)
    assert healing.request.pieces == [prefix[:-len(head)], SUFFIX]
    assert healing.request.slots[0].starts_with == head
    index, _ = shipped_tokens
    assert any(len(index.text(t)) > len(head) for t in index.agreeing(head))   # what the model may now write


@pytest.mark.parametrize("prefix, starts_with", [
    ("def f(x):\n    return x", ""),          # a word: the planner's typed word, not the engine's
    ("def f(x):\n    return", " "),           # blanks typed after a whole word: nothing joins across them
    ("def f(x):\n", "    "),                  # a line break: training cuts lines there
    ("def f(x):\n    y = foo(", "zq"),         # no token begins with `(zq`: `(` then `zq` is how it reads
])
def test_words_blanks_line_breaks_and_complete_tokens_stay(shipped_tokens, prefix, starts_with):
    assert healed(shipped_tokens, prefix, starts_with) is None


def test_only_a_slot_that_allows_it_heals_and_each_piece_is_judged_alone(shipped_tokens):
    assert healed(shipped_tokens, "    print(", heal=False) is None
    index, encode = shipped_tokens
    request = InfillRequest(["def f(a):\n    x = g(", ", 1)\n    y = a", "\n    return x[", "]\n"],
                            [Slot(8, True, heal_before=True), Slot(8, True, " ", heal_before=True),
                             Slot(8, True, heal_before=True)])
    healing = Healing.of(request, lambda: index, encode)
    assert healing.heads == ("(", "", "[")
    assert healing.request.pieces == ["def f(a):\n    x = g", ", 1)\n    y = a", "\n    return x", "]\n"]
    assert [s.starts_with for s in healing.request.slots] == ["(", " ", "["]


def test_the_texts_come_back_after_the_callers_piece(shipped_tokens):
    healing = healed(shipped_tokens, "    print(")
    assert healing.texts(['("hi"']) == ['"hi"']
    assert healing.texts(["()"]) == [")"]
    assert healing.texts(["x)"]) == [""]          # written without the head: it follows nothing the caller has
    tokens = [TokenConfidence(2, 0.9), TokenConfidence(4, 0.5)]
    assert healing.confidences([tokens]) == [[TokenConfidence(1, 0.9), TokenConfidence(3, 0.5)]]
    assert healing.confidences([[TokenConfidence(1, 0.3), TokenConfidence(3, 0.8)]]) == [[TokenConfidence(2, 0.8)]]


@pytest.fixture(scope="module")
def embedded(tiny_model_dir):
    return load_model(tiny_model_dir, "cpu")


PREFIX = "def greet(name):\n    print("


def test_the_engine_runs_the_healed_request_and_answers_for_the_callers(embedded):
    """With healing, the engine's answer is the healed request's answer with `(` taken off, for
    every candidate, streamed step and confidence; the tiny model's tokenizer joins `(` too."""
    engine = Engine(embedded)
    request = InfillRequest.single(PREFIX, SUFFIX, 8, single_line=True, heal_before=True)
    healing = Healing.of(request, engine.token_index, embedded.encode)
    assert healing is not None and healing.heads == ("(",)
    by_hand = InfillRequest.single(PREFIX[:-1], SUFFIX, 8, single_line=True, starts_with="(")
    for settings in (DecodeSettings(steps=4), DecodeSettings(steps=4, n=3, temperature=1.0, greedy_first=True)):
        streamed, streamed_by_hand = [], []
        result = engine.infill(request, settings, on_step=lambda s: streamed.append(s.slot_texts))
        raw = engine.infill(by_hand, settings, on_step=lambda s: streamed_by_hand.append(s.slot_texts))
        assert all(texts[0].startswith("(") for texts in raw.candidates), raw.candidates
        assert result.candidates == [[texts[0][1:]] for texts in raw.candidates]
        assert streamed == [[healing.texts(texts) for texts in step] for step in streamed_by_hand]
        assert result.confidences == [healing.confidences(slots) for slots in raw.confidences]


@pytest.mark.parametrize("layout", ["llada", "dream"])
def test_masked_diffusion_checkpoints_heal(tmp_path, layout):
    model = load_model(str(write_tiny_checkpoint(tmp_path / layout, layout, seed=1)), "cpu")
    check_healed_as_by_hand(model)


def test_the_block_loop_heals(tmp_path):
    model = load_model(str(write_tiny_block_checkpoint(tmp_path / "sdar", "sdar", seed=3)), "cpu")
    check_healed_as_by_hand(model)


def check_healed_as_by_hand(model) -> None:
    # The tiny checkpoints' 320-token vocabulary has no `("` or `()`, but `",` and `""`.
    prefix = PREFIX + '"'
    engine = Engine(model)
    request = InfillRequest.single(prefix, SUFFIX, 8, single_line=True, heal_before=True)
    healing = Healing.of(request, engine.token_index, model.encode)
    assert healing is not None and healing.heads == ('"',)
    by_hand = InfillRequest.single(prefix[:-1], SUFFIX, 8, single_line=True, starts_with='"')
    settings = DecodeSettings(steps=4, n=2, temperature=0.8)
    raw = engine.infill(by_hand, settings)
    assert engine.infill(request, settings).candidates == [healing.texts(texts) for texts in raw.candidates]


def test_dreamon_is_left_as_it_was(tmp_path):
    """DreamOn's loop has no frontier to write a start at: its requests are not healed."""
    model = load_model(str(write_tiny_checkpoint(tmp_path / "dreamon", "dreamon", seed=1)), "cpu")
    engine = Engine(model)
    settings = DecodeSettings(steps=4)
    prefix = PREFIX + '"'
    assert Healing.of(InfillRequest.single(prefix, SUFFIX, 8, heal_before=True), engine.token_index, model.encode)
    healing_asked = engine.infill(InfillRequest.single(prefix, SUFFIX, 8, single_line=True, heal_before=True), settings)
    plain = engine.infill(InfillRequest.single(prefix, SUFFIX, 8, single_line=True), settings)
    assert healing_asked.candidates == plain.candidates

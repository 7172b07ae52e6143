import random

import pytest
import torch
from tokenizers import Tokenizer

from dllm_lsp.arch.tiny import sample_corpus
from dllm_lsp.train.examples import IGNORE, LayoutOptions, build_example, sample_example
from dllm_lsp.train.spans import FileSpans, sample_spans


@pytest.fixture(scope="module")
def tok(small_tokenizer_path) -> Tokenizer:
    return Tokenizer.from_file(str(small_tokenizer_path))


@pytest.fixture(scope="module")
def fs() -> FileSpans:
    text = max(sample_corpus(), key=len)
    return FileSpans.analyse(text, "python")


def enc(tok, text: bytes) -> list[int]:
    return tok.encode(text.decode(), add_special_tokens=False).ids


def short_line(tok, fs, max_tokens=16) -> tuple[int, int]:
    for i in range(30, len(fs.line_starts) - 1):
        a, b = fs.line_starts[i], fs.line_starts[i + 1]
        if fs.data[a:b].strip() and len(enc(tok, fs.data[a:b])) <= max_tokens:
            return a, b
    raise AssertionError("no short line")


def test_canvas_is_laid_out_like_the_engine_does(tok, fs):
    opts = LayoutOptions(seq_len=128, max_slot=24, short_slot_prob=0.0)
    span = short_line(tok, fs)
    rng = random.Random(0)
    for _ in range(10):
        ex = build_example(fs, [span], tok, pad_id=1, opts=opts, rng=rng)
        assert ex is not None and ex.ids.shape == (128,)
        slot = ex.ids[ex.is_span].tolist()
        middle = enc(tok, fs.data[span[0]:span[1]])
        assert slot[:len(middle)] == middle and all(t == 1 for t in slot[len(middle):])
        assert len(slot) <= 24
        # The context right before the slot is the prefix text tokenized on its own.
        start = int(ex.is_span.nonzero()[0])
        prefix = enc(tok, fs.data[max(0, span[0] - 768):span[0]])
        assert ex.ids[:start].tolist() == prefix[len(prefix) - start:]
        # Causal-LM targets: the next context token, never across a slot, never inside one.
        assert (ex.ar_target[ex.is_span] == IGNORE).all()
        assert ex.ar_target[start - 1] == IGNORE
        assert ex.ar_target[: start - 1].tolist() == ex.ids[1:start].tolist()


def test_slots_are_sometimes_exactly_full(tok, fs):
    opts = LayoutOptions(seq_len=128, max_slot=24, full_slot_prob=0.5)
    rng = random.Random(1)
    span = short_line(tok, fs)
    full = [int((build_example(fs, [span], tok, 1, opts, rng).ids == 1).sum()) == 0 for _ in range(40)]
    assert any(full) and not all(full)


def test_a_slot_narrower_than_its_span_holds_its_start_and_the_text_after_the_span_follows(tok, fs):
    """What the engine's growing slots read a full slot as: "this goes on". Training never had a
    slot narrower than its span, so a full slot only meant "it ends exactly here"."""
    opts = LayoutOptions(seq_len=160, max_slot=48, short_slot_prob=1.0)
    span = next((a, b) for a, b in zip(fs.line_starts[30:], fs.line_starts[31:])
                if 17 < len(enc(tok, fs.data[a:b])) <= 48)
    middle = enc(tok, fs.data[span[0]:span[1]])
    rng = random.Random(2)
    widths = set()
    for _ in range(20):
        ex = build_example(fs, [span], tok, 1, opts, rng)
        slot = ex.ids[ex.is_span].tolist()
        widths.add(len(slot))
        assert len(slot) < len(middle) and slot == middle[:len(slot)]          # its start, no pad
        end = int(ex.is_span.nonzero()[-1]) + 1
        after = enc(tok, fs.data[span[1]:span[1] + 400])
        following = ex.ids[end:end + 4].tolist()
        assert following == after[:len(following)]                            # then what follows the span
    assert widths == {8, 16}


def test_too_long_spans_and_short_files_are_refused(tok, fs):
    opts = LayoutOptions(seq_len=128, max_slot=4)
    assert build_example(fs, [(fs.line_starts[10], fs.line_starts[30])], tok, 1, opts, random.Random(0)) is None
    small = FileSpans.analyse("x = 1\ny = 2\n", "python")
    assert build_example(small, [(0, 5)], tok, 1, LayoutOptions(seq_len=128), random.Random(0)) is None


def test_sampled_examples_have_one_to_three_slots(tok, fs):
    rng = random.Random(2)
    opts = LayoutOptions(seq_len=192, max_slot=64)
    n_slots = set()
    for _ in range(60):
        ex = sample_example(fs, tok, 1, opts, rng, tries=20)
        assert ex is not None and ex.ids.shape == (192,)
        edges = torch.diff(ex.is_span.int(), prepend=torch.zeros(1, dtype=torch.int32))
        n_slots.add(int((edges == 1).sum()))
    assert n_slots <= {1, 2, 3} and len(n_slots) >= 2


def test_context_windows_tokenize_like_the_whole_file(tok):
    """Only a window about as wide as the context wanted is tokenized (widened when it falls
    short), yet the canvas's context is the whole prefix and suffix tokenized on their own."""
    opts = LayoutOptions(seq_len=160, max_slot=32, bytes_per_token=0.5)   # first windows fall short
    rng = random.Random(3)
    checked = 0
    for text in sorted(sample_corpus(), key=len)[-12:]:
        fs = FileSpans.analyse(text, "python")
        for _ in range(12):
            spans = sample_spans(fs, rng)
            ex = build_example(fs, spans, tok, 1, opts, rng) if spans else None
            if ex is None:
                continue
            ids, is_span = ex.ids.tolist(), ex.is_span.tolist()
            first, last = is_span.index(True), len(is_span) - 1 - is_span[::-1].index(True)
            before = enc(tok, fs.data[:spans[0][0]])
            after = enc(tok, fs.data[spans[-1][1]:])
            assert ids[:first] == before[len(before) - first:]
            assert ids[last + 1:] == after[:len(ids) - last - 1]
            checked += 1
        assert fs.bytes_per_token is not None and 1.0 < fs.bytes_per_token < 8.0   # measured, then used
    assert checked >= 40

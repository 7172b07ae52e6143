"""Where a span may end (engine/span_ends.py), and the decode loops asking it (EndGate).

The judgement is checked case by case over the languages' delimiters; the loops are driven by
scripted models whose first choice would end a span with a bracket open and whose second
choice closes it, so the rule visibly changes the completion (and switched off, does not).
"""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from tokenizers import Tokenizer, models

from dllm_lsp.engine.blockwise import decode_blockwise
from dllm_lsp.engine.denoise import denoise
from dllm_lsp.engine.denoiser import Canvas, Denoiser, SpecialTokens
from dllm_lsp.engine.span_ends import LEXICONS, SpanEnds
from dllm_lsp.engine.types import DecodeSettings, InfillRequest, Slot


def allows(before: str, span: str, after: str, language: str = "python", single_line: bool = False) -> bool:
    ends = SpanEnds.for_request(InfillRequest.single(before, after, 8, single_line, language))
    return ends.allows(0, span)


@pytest.mark.parametrize("before, span, after, expected", [
    ("def f():\n    ", "return foo(a", "\n", False),               # the span opened `(`
    ("def f():\n    ", "return foo(a)", "\n", True),
    ("x = foo(", "a, b", ")\n", True),                             # the line's own `(`: not the span's
    ("x = foo(", "bar(x", "\n", False),
    ("x = foo(", "a, bar(x", ")\n", True),                         # the rest of the line closes it
    ("x = foo(", "a]", "\n", True),                                # a stray closer opens nothing
    ("    ", "x = [a, (b]", "\n", False),                          # `]` does not close `(`
    ("    ", "x = 'abc", "\n", False),                             # a string the span opened
    ('x = "ab', "c", '"\n', True),                                 # the cursor is inside the string
    ("x = f(", '"a', '")\n', True),                                # the line's closing quote ends it
    ("    ", "x = 1  # don't (", "\n", True),                      # comments hide delimiters
    ("x = 1  # it's ", "(", "\n", True),                           # the cursor is in a comment
    ("x = 1  # it's\n", "(", "\n", False),                         # ... that ended on its line
    ('    """Return the', " sum of a (and b", "\n", True),          # inside a docstring: prose
    ('    """Don', "'t", "\n", True),
    ('    """Return the', ' sum""" + foo(', "\n", False),            # closed the docstring, then opened `(`
    ('    """Done."""\n    ', "x = foo(", "\n", False),             # a closed docstring holds nothing
    ("    return foo(a,\n", "b", ")\n", True),
    ("    ", "x = [\n        1,\n", "    ]\n", True),               # closed by the line after the span
    ("    ", "x = (a // b", "\n", False),                           # `//` is division in Python
    ("    ", "x = (a // b)", "\n", True),
    ("    ", 's = "it\'s"', "\n", True),
    ("    ", 's = "\\"("', "\n", True),                             # an escaped quote
])
def test_python_ends(before, span, after, expected):
    assert allows(before, span, after) is expected


@pytest.mark.parametrize("language, before, span, after, expected", [
    ("rust", "fn f<", "'a>(x: &'a str", "\n", False),              # a lifetime is no quote ...
    ("rust", "fn f<", "'a>(x: &'a str)", "\n", True),
    ("rust", "let c = ", "'('", ";\n", True),                      # ... a character literal is one
    ("rust", "let s = ", '"multi\nline', "\n", False),
    ("c", "/* see ", "(a", "\n", True),
    ("c", "x = ", "a /* (", "\n", False),                          # a block comment the span opened
    ("c", "x = ", "a; // (", "\n", True),
    ("cpp", "int n = ", "1'000'000", ";\n", True),                  # digit separators
    ("javascript", "const s = ", "`a ${b} (", "`;\n", True),
    ("javascript", "const s = ", "`a (", "\n", False),
    ("typescript", "f(", "() => {", "\n", False),
    ("go", "s := ", "`raw (", "`\n", True),
    ("java", "var c = ", "'{'", ";\n", True),
    ("lua", "local s = ", "[[ ( ]]", "\n", True),
    ("lua", "-- it's ", "(", "\n", True),
    ("lua", "x = ", "f(", "\n", False),
])
def test_other_languages(language, before, span, after, expected):
    assert allows(before, span, after, language) is expected


def test_single_line_slot_that_broke_its_line_may_end():
    # What follows the break is cut off by post-processing anyway: refusing would only cost steps.
    assert allows("    ", "foo(a\nb", "\n", single_line=True)
    assert not allows("    ", "foo(a\nb", "\n", single_line=False)


def test_no_rule_without_a_known_language():
    assert SpanEnds.for_request(InfillRequest.single("x = (", ")", 8)) is None
    assert SpanEnds.for_request(InfillRequest.single("x = (", ")", 8, language="markdown")) is None
    assert set(LEXICONS) >= {"python", "javascript", "typescript", "tsx", "rust", "go", "c", "cpp", "java", "lua"}


def test_each_slot_reads_its_own_surroundings():
    request = InfillRequest(["x = '", " y = (", "\n"], [Slot(4), Slot(4)], "python")
    ends = SpanEnds.for_request(request)
    assert ends.allows(0, "it")             # inside the string the first piece opened
    assert ends.allows(1, "a, (b)")
    assert not ends.allows(1, "a, (b")


# -- the loops --------------------------------------------------------------------------------------

WORDS = ["<mask>", "<pad>", "f(", "x", ")", "y"]
MASK, PAD, CALL, X, CLOSE, Y = range(6)


def _tokenizer() -> Tokenizer:
    return Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<mask>"))


def _logits(first: int, second: int | None, rows: int) -> torch.Tensor:
    """A row whose top token is `first` (p 0.95) and next `second` (p 0.04)."""
    probs = torch.full((len(WORDS),), 0.01 / len(WORDS))
    probs[first] = 0.95
    if second is not None:
        probs[second] = 0.04
    return probs.log()[None].repeat(rows, 1)


# At each span offset: the model's first and second choices. It wants to end after `f( x`.
SCRIPT = {0: (CALL, None), 1: (X, None), 2: (PAD, CLOSE), 3: (PAD, Y), 4: (PAD, Y), 5: (PAD, Y)}


class ScriptedDenoiser(Denoiser):
    family = name = "scripted"

    def __init__(self) -> None:
        self.tokenizer = _tokenizer()
        self.special = SpecialTokens(mask_id=MASK, pad_id=PAD)
        self.device = torch.device("cpu")
        self.max_context = 64

    def session(self, canvas, batch, cache=None):
        width = canvas.span_positions().numel()

        class Session:
            def logits(self, ids, wanted=None):
                """[B, span, V] (or the `wanted` rows): the script's choices at each span offset."""
                rows = [_logits(*SCRIPT[s], 1)[0] for s in range(width)]
                out = torch.stack(rows)[None].repeat(ids.shape[0], 1, 1)
                return out if wanted is None else out[wanted]

        return Session()


def _text(ids: list[int]) -> str:
    return _tokenizer().decode([i for i in ids if i not in (MASK, PAD)])


@pytest.mark.parametrize("balanced", [True, False])
def test_masked_diffusion_loop_closes_what_the_span_opened(balanced):
    denoiser = ScriptedDenoiser()
    canvas = Canvas(torch.tensor([Y] + [MASK] * 6 + [Y]), [(1, 7)])
    ends = SpanEnds.for_request(InfillRequest.single("", "\n", 6, language="python"))
    out = denoise(denoiser, canvas, DecodeSettings(steps=6, threshold=0.9, ends_balanced=balanced), ends=ends)
    span = out.span_ids[0].tolist()
    if balanced:
        # The end at offset 2 is refused, the model's second choice `)` takes it; then it may end.
        assert _text(span) == "f( x )" and span[3:] == [PAD] * 3
    else:
        assert _text(span) == "f( x" and span[2:] == [PAD] * 4


def test_engine_applies_the_rule_for_a_request_that_names_its_language():
    from dllm_lsp.engine.engine import Engine

    engine = Engine(ScriptedDenoiser())
    settings = DecodeSettings(steps=6, threshold=0.9, slot_start_tokens=0, ends_balanced=True)
    named = engine.infill(InfillRequest.single("y", "\n", 6, language="python"), settings)
    unnamed = engine.infill(InfillRequest.single("y", "\n", 6), settings)
    off = engine.infill(InfillRequest.single("y", "\n", 6, language="python"), replace(settings, ends_balanced=False))
    assert named.text == "f( x )" and unnamed.text == "f( x" and off.text == "f( x"
    assert not DecodeSettings().ends_balanced      # opt-in: docs/eval.md says why


class ScriptedPort:
    """A block-diffusion port with the same script (blocks of 4 from position 0)."""

    block_size, sub_block_size = 4, None

    def __init__(self) -> None:
        self.special = SpecialTokens(mask_id=MASK, pad_id=PAD, eos_id=PAD)
        self.device = torch.device("cpu")
        self.t0 = 0

    def context_ids(self, prefix, suffix):
        self.t0 = len(prefix)
        return prefix

    def new_cache(self, batch):
        return None

    def block_logits(self, cache, ids, start, rows=None):
        start += ids.shape[1] - self.block_size
        out = torch.stack([_logits(*SCRIPT.get(start + i - self.t0, (Y, None)), 1)[0]
                           for i in range(self.block_size)])[None].repeat(ids.shape[0], 1, 1)
        return out if rows is None else out[rows]

    def decode(self, ids):
        return _tokenizer().decode(ids)


@pytest.mark.parametrize("balanced", [True, False])
def test_block_loop_closes_what_the_span_opened(balanced):
    canvas = Canvas(torch.tensor([Y, Y, Y] + [MASK] * 6), [(3, 9)])
    ends = SpanEnds.for_request(InfillRequest.single("", "", 6, language="python"))
    out = decode_blockwise(ScriptedPort(), canvas, DecodeSettings(steps=4, ends_balanced=balanced), ends=ends)
    assert _text(out.span_ids[0].tolist()) == ("f( x )" if balanced else "f( x")

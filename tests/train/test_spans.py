import random

import pytest

from dllm_lsp.train.spans import KINDS, FileSpans, sample_span, sample_spans

SOURCE = '''import os


def join_all(parts, sep=", "):
    """Join parts."""
    out = []
    for p in parts:
        if p:
            out.append(str(p).strip())
    return sep.join(out)


class Box:
    def __init__(self, width, height=2):
        self.area = width * height
'''


@pytest.fixture(scope="module")
def fs() -> FileSpans:
    return FileSpans.analyse(SOURCE, "python")


def test_syntax_nodes_are_found(fs):
    text = fs.data
    args = {text[a:b].decode() for a, b in fs.nodes["arguments"]}
    assert 'parts, sep=", "' in args and "self, width, height=2" in args
    assert any(text[a:b].decode().startswith('"""Join parts."""\n    out = []') for a, b in fs.nodes["block"])
    assert "str(p).strip()" in {text[a:b].decode() for a, b in fs.nodes["expression"]}


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_gives_spans_inside_the_file(fs, kind):
    rng = random.Random(0)
    for _ in range(30):
        span = sample_span(fs, kind, rng)
        assert span is not None
        a, b = span
        assert 0 <= a < b <= len(fs.data)
        fs.data[a:b].decode("utf-8")   # on character boundaries


def test_line_spans_are_whole_lines_with_newline(fs):
    rng = random.Random(1)
    for _ in range(20):
        a, b = sample_span(fs, "lines", rng)
        assert a == 0 or fs.data[a - 1:a] == b"\n"
        assert fs.data[b - 1:b] == b"\n"
        a, b = sample_span(fs, "block", rng)
        assert a == 0 or fs.data[a - 1:a] == b"\n"


def test_line_tails_end_at_the_line_end(fs):
    rng = random.Random(2)
    for _ in range(20):
        a, b = sample_span(fs, "line_tail", rng)
        assert b == len(fs.data) or fs.data[b:b + 1] == b"\n"
        assert b"\n" not in fs.data[a:b]


def test_multiple_spans_are_sorted_and_separated(fs):
    rng = random.Random(3)
    counts = set()
    for _ in range(200):
        spans = sample_spans(fs, rng)
        counts.add(len(spans))
        for (a1, b1), (a2, b2) in zip(spans, spans[1:]):
            assert b1 < a2
    assert counts >= {1, 2, 3}


def test_javascript_is_parsed_too():
    fs = FileSpans.analyse("function add(a, b) {\n  return a + b;\n}\n", "javascript")
    text = fs.data
    assert [text[a:b] for a, b in fs.nodes["arguments"]] == [b"a, b"]
    assert [text[a:b] for a, b in fs.nodes["block"]] == [b"{\n  return a + b;\n}"]
    assert b"a + b" in {text[a:b] for a, b in fs.nodes["expression"]}


def test_unknown_language_is_a_clear_error():
    with pytest.raises(ValueError, match="no tree-sitter grammar"):
        FileSpans.analyse("x", "cobol")

"""Incremental reparses and text search agree with full parses and tree walks."""
from __future__ import annotations

import random

import pytest

from dllm_lsp.multisite.node_types import word_nodes
from dllm_lsp.syntax.nodes import walk
from dllm_lsp.syntax.snapshot import Snapshot
from dllm_lsp.text_compare import common_prefix_length, common_suffix_length

TEXT = (
    "import os\n\n\ndef área(width, height):\n    \"\"\"Größe 😀 of width.\"\"\"\n"
    "    return width * height\n\n\nclass C:\n    def m(self, width):\n        return [width for _ in 'ü']\n"
)
PIECES = ["", "x", "\n", "\n    y = 1\n", "😀", "é\né", "(", "def g():\n    pass\n", "width"]


@pytest.mark.parametrize("seed", range(12))
def test_incremental_reparse_matches_a_full_parse(seed):
    rng = random.Random(seed)
    base = Snapshot.parse(TEXT, "python")
    start = rng.randrange(len(TEXT))
    end = min(len(TEXT), start + rng.randrange(12))
    inserted = rng.choice(PIECES)
    text = TEXT[:start] + inserted + TEXT[end:]
    fast = base.reparsed(text, start, end, start + len(inserted))
    assert str(fast.root) == str(Snapshot.parse(text, "python").root)
    assert fast.error_count() == Snapshot.parse(text, "python").error_count()


def test_word_nodes_match_a_tree_walk():
    source = Snapshot.parse(TEXT, "python")
    walked = [n for n in walk(source.root) if n.type == "identifier" and source.node_text(n) == "width"]
    found = [n for n in word_nodes(source, "width") if n.type == "identifier"]
    assert [(n.start_byte, n.end_byte) for n in found] == [(n.start_byte, n.end_byte) for n in walked]
    assert [source.node_text(n) for n in word_nodes(source, "área")] == ["área"]


def test_common_affixes():
    assert common_prefix_length("abcdef", "abcxef") == 3
    assert common_suffix_length("abcdef", "abcxef", 10) == 2
    assert common_suffix_length("aaa", "aaa", 1) == 1
    assert common_prefix_length("", "x") == 0

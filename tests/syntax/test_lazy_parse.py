"""A large document's snapshot is handed out at once and parsed when its tree is first read (the
server reads it off the event loop); every snapshot's tree is the tree of its own text, whatever
thread parses it and however many edits came meanwhile."""
from __future__ import annotations

import random
import threading

from dllm_lsp.syntax.document import SYNC_PARSE_BYTES, ParsedDocument
from dllm_lsp.syntax.snapshot import Snapshot, TreeSlot, parse

UNIT = "def f{n}(values, scale={n}):\n    return [v * scale for v in values if v]\n\n\n"
BIG = "".join(UNIT.format(n=n) for n in range(4 * SYNC_PARSE_BYTES // len(UNIT)))


def fresh(text: str, language_id: str = "python") -> str:
    return str(Snapshot.parse(text, language_id).root)


def test_a_small_document_is_parsed_at_once_a_large_one_when_read():
    small = ParsedDocument("x = 1\n", "python")
    assert small.pending is None
    big = ParsedDocument(BIG, "python")
    slot = big.pending
    assert slot is not None and not slot.done
    snapshot = big.snapshot
    assert snapshot.language == "python"            # known without the parse
    assert not slot.done
    assert str(snapshot.tree.root_node) == fresh(BIG)
    assert slot.done and big.pending is None


def test_edits_before_the_first_parse_are_applied_to_one_parse_and_every_version_keeps_its_tree():
    rng = random.Random(7)
    doc = ParsedDocument(BIG, "python")
    versions = [(doc.snapshot, BIG)]
    text = BIG
    for _ in range(12):
        start = rng.randrange(len(text))
        end = min(len(text), start + rng.choice([0, 1, 3]))
        new = rng.choice(["x", "(", "\n", "    return 1\n", "é", ""])
        doc.edit(start, end, new)
        text = text[:start] + new + text[end:]
        versions.append((doc.snapshot, text))
    # the newest first: it parses from scratch, the versions between stay unparsed ...
    latest = versions[-1][0]
    assert str(latest.tree.root_node) == fresh(text)
    assert not versions[5][0].source.done
    # ... and each parses itself, to its own text, when read (incrementally from the first)
    for snapshot, expected in reversed(versions[:-1]):
        assert snapshot.text == expected
        assert str(snapshot.tree.root_node) == fresh(expected)


def test_incremental_reparse_after_a_parsed_version_matches_a_fresh_parse():
    doc = ParsedDocument(BIG, "python")
    doc.tree   # noqa: B018 - parsed
    at = BIG.index("return", len(BIG) // 2)
    doc.edit(at, at, "if x:\n        ")
    assert doc.pending is not None
    assert str(doc.tree.root_node) == fresh(doc.text)


def test_a_parse_in_another_thread_gives_the_same_tree_and_readers_wait_for_it():
    doc = ParsedDocument(BIG, "python")
    snapshot = doc.snapshot
    trees = []
    threads = [threading.Thread(target=lambda: trees.append(snapshot.tree)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(trees) == 3 and all(t is trees[0] for t in trees)   # one parse, read by all
    assert str(trees[0].root_node) == fresh(BIG)


def test_a_chunked_parse_reads_the_same_tree_as_a_whole_one():
    data = BIG.encode()
    assert str(parse("python", data, chunked=True).root_node) == str(parse("python", data).root_node)


def test_a_slot_without_a_grammar_has_no_tree_and_needs_no_parse():
    slot = TreeSlot("cobol", b"x" * 10)
    assert slot.done and not slot.has_tree and slot.resolve() is None

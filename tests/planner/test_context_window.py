"""The context window: prefix and suffix cut to the budget at line boundaries, a prefix start
that stays put while typing, and snippets from other documents chosen by shared identifiers."""
import pytest

from dllm_lsp import pipeline
from dllm_lsp.loader import load_model
from dllm_lsp.options import Options
from dllm_lsp.syntax.document import ParsedDocument
from dllm_lsp.syntax.snapshot import Snapshot
from dllm_lsp.planner import context
from dllm_lsp.planner.context import INDEXES, SNIPPET_DOCUMENTS, IndexCache, relevant_snippets
from dllm_lsp.planner.spans import PlannerSettings, plan_span


def numbered_lines(count: int) -> str:
    return "".join(f"value_{i:04d} = compute({i})\n" for i in range(count))   # 27 characters a line


def test_prefix_and_suffix_are_cut_to_budget_at_line_starts():
    text = numbered_lines(2000)
    cursor = text.index("value_1000")
    settings = PlannerSettings(context_chars=2000, prefix_share=0.75, prefix_quantum=1)
    plan = plan_span(Snapshot.parse(text, "python"), cursor, settings)
    prefix, suffix = plan.request.prefix, plan.request.suffix
    assert len(prefix) <= 1500 and len(suffix) <= 500
    assert len(prefix) > 1500 - 27 and len(suffix) > 500 - 27       # nearly all of the budget is used
    assert text[cursor - len(prefix) - 1] == "\n" and prefix.startswith("value_")   # whole lines
    assert suffix.endswith("\n") and text[cursor:].startswith(suffix)
    assert (plan.context_start, plan.context_end) == (cursor - len(prefix), cursor + len(suffix))


def test_prefix_start_stays_put_while_typing():
    text = numbered_lines(1000)
    cursor = text.index("value_0500") + 5
    settings = PlannerSettings(context_chars=4000, prefix_quantum=512)
    doc = ParsedDocument(text, "python")
    starts = set()
    for typed in range(20):   # type 20 characters at the cursor
        plan = plan_span(doc.snapshot, cursor + typed, settings)
        starts.add(plan.context_start)
        assert plan.request.prefix == doc.text[plan.context_start: cursor + typed] if plan.kind != "identifier" \
            else plan.request.prefix == doc.text[plan.context_start: plan.replace_start]
        doc.edit(cursor + typed, cursor + typed, "z")
    assert len(starts) == 1


def test_mid_line_cut_when_one_line_exceeds_budget():
    text = "x = [" + ", ".join(str(i) for i in range(3000)) + "]\n"
    cursor = len(text) - 2
    plan = plan_span(Snapshot.parse(text, "python"), cursor, PlannerSettings(context_chars=1000, prefix_quantum=1))
    assert len(plan.request.prefix) == 750
    assert plan.request.suffix == "]\n"
    coarse = plan_span(Snapshot.parse(text, "python"), cursor, PlannerSettings(context_chars=1000, prefix_quantum=4096))
    assert 750 * 3 // 4 <= len(coarse.request.prefix) <= 750   # a coarse quantum never eats the budget


OTHER_DOCS = [
    ("file:///proj/geometry.py",
     "import math\n\n\ndef area_of_circle(radius):\n    return math.pi * radius ** 2\n\n\n"
     "def circumference(radius):\n    return 2 * math.pi * radius\n"),
    ("file:///proj/unrelated.py", "def parse_header(blob):\n    return blob.split(b'\\n')\n"),
]


def test_relevant_snippets_are_prepended_as_comments():
    text = "from geometry import area_of_circle, circumference\n\nradius = 3\ntotal = area_of_circle(radius) + "
    plan = plan_span(Snapshot.parse(text, "python"), len(text), PlannerSettings(), OTHER_DOCS)
    prefix = plan.request.prefix + plan.healed     # the blank after `+` goes to the model
    assert plan.healed == " " and prefix.endswith(text)
    snippets = prefix[: len(prefix) - len(text)]
    assert snippets.startswith("# From geometry.py:\n")
    assert "# def area_of_circle(radius):\n" in snippets
    assert all(line.startswith("#") for line in snippets.splitlines())
    assert "parse_header" not in snippets          # no shared identifiers: not relevant
    assert plan.snippet_sources == ("geometry.py",)
    assert plan.context_start == 0


def test_snippets_use_the_language_comment_syntax_and_budget():
    text = "local r = area_of_circle(radius) + circumference(radius)\n"
    plan = plan_span(Snapshot.parse(text, "lua"), len(text) - 1, PlannerSettings(), OTHER_DOCS)
    assert plan.request.prefix.startswith("-- From geometry.py:\n-- ")
    small = plan_span(Snapshot.parse(text, "lua"), len(text) - 1, PlannerSettings(snippet_chars=20), OTHER_DOCS)
    assert small.request.prefix == text[: len(text) - 1] and small.snippet_sources == ()


def test_no_snippets_without_comment_syntax_or_overlap():
    text = "area_of_circle(radius) + circumference(radius) + \n"
    plain = plan_span(Snapshot.parse(text, "plaintext"), len(text) - 1, PlannerSettings(), OTHER_DOCS)
    assert plain.request.prefix + plain.healed == text[:-1] and plain.healed == " "
    unrelated = "zzz_top = 1\n"
    plan = plan_span(Snapshot.parse(unrelated, "python"), len(unrelated) - 1, PlannerSettings(), OTHER_DOCS)
    assert plan.request.prefix == unrelated[:-1] and plan.snippet_sources == ()


def test_snippets_take_their_share_from_the_prefix_budget():
    text = numbered_lines(400) + "area_of_circle(radius) + "
    settings = PlannerSettings(context_chars=4000, prefix_quantum=1)
    with_snippets = plan_span(Snapshot.parse(text, "python"), len(text), settings, OTHER_DOCS)
    without = plan_span(Snapshot.parse(text, "python"), len(text), settings)
    assert with_snippets.snippet_sources == ("geometry.py",)
    assert len(with_snippets.request.prefix) <= 3000 and len(without.request.prefix) <= 3000
    assert with_snippets.context_start > without.context_start   # own text gave way to the snippet


def test_the_documents_looked_at_are_indexed_once_however_many_are_open():
    """A cache of 64 entries re-indexed every other document on every keystroke once 65 were open;
    now the first SNIPPET_DOCUMENTS of them (the server lists the most recent first) are looked at,
    each indexed once."""
    others = [(f"file:///module{i}.py", f"def helper_{i}(radius):\n    return area_of_circle(radius) * {i}\n")
              for i in range(200)]
    text = "total = area_of_circle(radius) + "
    before = INDEXES.builds
    for _ in range(3):                               # three keystrokes' plans
        plan = plan_span(Snapshot.parse(text, "python"), len(text), PlannerSettings(), others)
    assert INDEXES.builds - before == SNIPPET_DOCUMENTS
    assert plan.snippet_sources[0] == "module0.py"   # equal scores: the first listed wins


def test_big_open_documents_are_no_snippet_source_and_a_plan_indexes_what_the_cache_keeps(monkeypatch):
    """Five open files of 3.6 M characters emptied the index cache at every plan (more than it
    holds): each keystroke re-indexed them all. A document over SNIPPET_MAX_DOCUMENT_CHARS is not
    looked at, and one plan looks at no more than SNIPPET_MAX_CHARS."""
    def module(i: int, lines: int) -> tuple[str, str]:
        return f"file:///big{i}.py", f"def helper_{i}(radius):\n    return area_of_circle(radius)\n" * lines

    text = "total = area_of_circle(radius) + "
    huge = module(0, context.SNIPPET_MAX_DOCUMENT_CHARS // 50 + 1)
    assert len(huge[1]) > context.SNIPPET_MAX_DOCUMENT_CHARS
    before = INDEXES.builds
    plan = plan_span(Snapshot.parse(text, "python"), len(text), PlannerSettings(), [huge, module(1, 3)])
    assert INDEXES.builds - before == 1 and plan.snippet_sources == ("big1.py",)
    # The characters one plan looks at: a smaller cap, met by the fourth of these documents.
    monkeypatch.setattr(context, "SNIPPET_MAX_CHARS", 3 * len(module(10, 100)[1]) + 10)
    before = INDEXES.builds
    for _ in range(3):
        plan_span(Snapshot.parse(text, "python"), len(text), PlannerSettings(), [module(i, 100) for i in range(10, 16)])
    assert INDEXES.builds - before == 3


def test_the_index_cache_keeps_what_fits_its_characters_most_recent_first():
    texts = [f"alpha_{i} = beta_{i}\n" * 3 for i in range(10)]         # 51 characters each
    cache = IndexCache(max_chars=2 * len(texts[0]))                   # room for two
    for text in texts:
        chunks, index, _ = cache.get(text, 40)
        assert chunks == [text.strip("\n")] and f"alpha_{texts.index(text)}" in index
    assert cache.builds == 10
    cache.get(texts[9], 40), cache.get(texts[8], 40)                    # the last two fit: kept
    assert cache.builds == 10
    cache.get(texts[0], 40)                                              # long evicted: built again
    assert cache.builds == 11


@pytest.mark.parametrize("comment", ["#", "//", "--"])
def test_a_snippet_fits_a_budget_of_exactly_its_length(comment):
    """Blocks are measured before they are formatted: the measure must be the block's length."""
    chunk = "def area_of_circle(radius):   \n\n    \treturn 3.14 * radius ** 2\t\n  \n# radius note"
    others = [("file:///src/geometry.py", chunk)]
    words = {"area_of_circle", "radius"}
    block, sources = relevant_snippets(words, others, 10_000, comment, 40, 1)
    assert sources == ("geometry.py",) and block.startswith(f"{comment} From geometry.py:\n")
    assert relevant_snippets(words, others, len(block), comment, 40, 1) == (block, ("geometry.py",))
    assert relevant_snippets(words, others, len(block) - 1, comment, 40, 1) == ("", ())


def test_slots_are_no_wider_than_the_model_was_trained_on():
    """The shipped preview saw slots of 48 tokens at most; block bodies were planned 64 wide."""
    snapshot = Snapshot.parse("def f(x):\n    \n", "python")
    assert pipeline.plan(snapshot, 14, Options()).request.slots[0].max_tokens == 64
    assert pipeline.plan(snapshot, 14, Options(), model_max_slot=48).request.slots[0].max_tokens == 48
    assert pipeline.plan(snapshot, 14, Options(), model_max_slot=None).request.slots[0].max_tokens == 64
    assert load_model("dllm-embedded-3m-cpu-preview", "cpu").max_slot == 48

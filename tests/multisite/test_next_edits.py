"""Change detection and related sites, from earlier document versions (no model)."""
from __future__ import annotations

import pytest

from dllm_lsp.multisite.next_edits import EditHistory, changed_words, plan_next_edits
from dllm_lsp.multisite.sites import apply_outcomes
from dllm_lsp.syntax.snapshot import Snapshot

from .edits import offset
from .samples import (
    CALL_ARGUMENTS,
    CALL_CHANGE_SITES,
    CALL_CHANGES,
    RENAME_SITES,
    RENAMES,
    SIGNATURES,
    changed_call,
)


def typed_rename(text: str, old: str, new: str, at: int) -> list[str]:
    """Every version a user goes through deleting `old` at `at` one key at a time, then typing `new`."""
    versions = [text]
    for _ in old:
        text = text[:at] + text[at + 1:]
        versions.append(text)
    for i, char in enumerate(new):
        text = text[:at + i] + char + text[at + i:]
        versions.append(text)
    return versions


@pytest.mark.parametrize("language", sorted(RENAMES))
def test_parameter_rename_typed_key_by_key_reaches_every_reference(language):
    text = RENAMES[language]
    at = text.index("area(") + len("area(")
    versions = typed_rename(text, "width", "size", at)
    history = EditHistory()
    for version in versions:
        history.record("file:///x", version)
    current = versions[-1]
    plan = plan_next_edits(history.earlier("file:///x", current), current, language)
    assert plan is not None and plan.change.kind == "rename"
    assert (plan.change.old_name, plan.change.new_name) == ("width", "size")
    # every reference (and doc mention) in area(), shifted by the shorter name on line 1 only
    expected = sorted(offset(current, line, column) for line, column in RENAME_SITES[language])
    assert [e.start for e in plan.renames] == expected
    assert all(current[e.start:e.end] == "width" and e.new_text == "size" for e in plan.renames)
    renamed = apply_outcomes(current, plan.renames)
    assert Snapshot.parse(renamed, language).error_count() == 0
    area = renamed[:renamed.index("other")]
    assert "obj.width" in area or "s.width" in area   # a field of the same name is left alone
    assert renamed[renamed.index("other"):] == current[current.index("other"):]   # other scopes untouched


@pytest.mark.parametrize("language", sorted(SIGNATURES))
def test_added_parameter_masks_every_call_site(language):
    before, after = SIGNATURES[language]
    plan = plan_next_edits([before], after, language, line_tokens=12)
    assert plan is not None and plan.change.kind == "signature"
    assert (plan.change.old_count, plan.change.new_count) == (1, 2)
    expected = [(offset(after, line, a), offset(after, line, b)) for line, a, b in CALL_ARGUMENTS[language]]
    assert [(s.start, s.end) for s in plan.sites] == expected
    assert all(s.single_line and s.max_tokens == 12 for s in plan.sites)


def test_function_rename_renames_its_references():
    # Every reference to the function's binding, not its calls alone (`x = area` kept the old name).
    before = "def area(w):\n    return w\n\n\nprint(area(1))\nx = area\n"
    after = before.replace("def area", "def surface")
    plan = plan_next_edits([before], after, "python")
    assert [after[e.start:e.end] for e in plan.renames] == ["area", "area"]
    assert apply_outcomes(after, plan.renames) == after.replace("area", "surface")


def test_no_change_or_unrelated_change_gives_no_plan():
    text = RENAMES["python"]
    assert plan_next_edits([text], text, "python") is None
    renamed = text.replace("height", "h", 1)   # a real rename, for contrast
    plan = plan_next_edits([text], renamed, "python")
    assert [(e.label, e.new_text) for e in plan.renames] == [("documentation of height", "h"),
                                                              ("reference to height", "h")]
    assert plan_next_edits([text], text + "\n# comment\n", "python") is None


def test_half_typed_versions_are_skipped():
    before, after = SIGNATURES["python"]
    half = after.replace("factor):", "factor")   # a parse error on the way
    plan = plan_next_edits([half, before], after, "python")
    assert plan is not None and plan.change.old_count == 1


def test_changed_words_grows_to_identifiers():
    assert changed_words("a = width + 1", "a = wide + 1") == (4, 9, 8)
    assert changed_words("same", "same") is None


def test_history_is_bounded():
    history = EditHistory(max_versions=3, max_chars=10_000)
    for i in range(10):
        history.record("u", f"v{i}")
    assert history.earlier("u", "v9") == ["v8", "v7"]
    history.record("u", "v9")   # unchanged text is not a new version
    assert history.earlier("u", "now") == ["v9", "v8", "v7"]
    history.forget("u")
    assert history.earlier("u", "now") == []


def test_all_documents_histories_are_bounded_together_the_least_recently_changed_first():
    history = EditHistory(max_versions=10, max_chars=10_000, max_total_chars=40)
    for i in range(4):
        history.record("a", f"a{i}-----")            # 8 characters a version
    for i in range(4):
        history.record("b", f"b{i}-----")
    # 64 characters over 40: "a" (changed least recently) gives up its oldest versions first
    assert history.earlier("a", "now") == ["a3-----"]
    assert history.earlier("b", "now") == ["b3-----", "b2-----", "b1-----", "b0-----"]
    for i in range(4, 9):
        history.record("b", f"b{i}-----")
    assert history.earlier("a", "now") == ["a3-----"]            # its current text stays
    assert len(history.earlier("b", "now")) == 4                  # 8 + 4 * 8 = 40


def test_parameter_rename_reaches_keyword_arguments_of_its_calls():
    before = "def area(width, height):\n    return width * height\n\n\narea(width=2, height=3)\nother(width=1)\n"
    after = before.replace("area(width,", "area(size,")
    plan = plan_next_edits([before], after, "python")
    assert apply_outcomes(after, plan.renames) == (
        "def area(size, height):\n    return size * height\n\n\narea(size=2, height=3)\nother(width=1)\n"
    )
    assert [e.label for e in plan.renames][-1] == "keyword argument of area"


@pytest.mark.parametrize("language", sorted(CALL_CHANGES))
def test_argument_added_at_one_call_masks_the_other_calls_and_the_definition(language):
    before, after = changed_call(language)
    plan = plan_next_edits([before], after, language)
    assert plan is not None and plan.change.kind == "call" and plan.change.new_name == "scale"
    assert (plan.change.old_count, plan.change.new_count) == (1, 2)
    expected = [(offset(after, line, a), offset(after, line, b)) for line, a, b in CALL_CHANGE_SITES[language]]
    assert [(s.start, s.end) for s in plan.sites] == expected
    assert plan.sites[0].label == "parameters of scale" and plan.sites[0].owner_type is not None


def test_nested_calls_give_sites_that_never_overlap():
    """`add(add(1, 2), 3)`: both argument lists were sites, one inside the other, and the joint
    fill refused them ("sites overlap": InternalError -32603). The inner list is kept."""
    before = "def add(a, b):\n    return a + b\n\n\nx = add(add(1, 2), 3)\n"
    after = before.replace("def add(a, b)", "def add(a, b, c)")
    plan = plan_next_edits([before], after, "python")
    assert plan is not None and plan.change.kind == "signature"
    assert [after[s.start:s.end] for s in plan.sites] == ["1, 2"]


def test_a_call_around_the_changed_call_is_not_a_site():
    """An argument added to the inner call of `mul(mul(1, 2), 3)`: the outer call's argument list
    holds the user's edit, and masking it would have the model write over it."""
    before = "def mul(a, b):\n    return a * b\n\n\nx = mul(mul(1, 2), 3)\ny = mul(4, 5)\n"
    after = before.replace("mul(mul(1, 2), 3)", "mul(mul(1, 2, 7), 3)")
    plan = plan_next_edits([before], after, "python")
    assert plan is not None and plan.change.kind == "call"
    texts = [after[s.start:s.end] for s in plan.sites]
    assert "mul(1, 2, 7), 3" not in texts and "4, 5" in texts and "a, b" in texts, texts


def test_a_rename_in_a_file_with_lone_carriage_returns_reaches_every_reference():
    """Classic Mac line ends: the grammar read the file as one line, the `return` fell outside
    the function, and the rename left `return val` behind."""
    before = "def f(val):\r    t = val + 1\r    return val\r"
    after = before.replace("f(val)", "f(value)")
    plan = plan_next_edits([before], after, "python", near=(0, after.index("\r")))
    assert plan is not None and plan.change.kind == "rename"
    assert apply_outcomes(after, plan.renames) == "def f(value):\r    t = value + 1\r    return value\r"


def test_a_call_site_over_several_lines_with_lone_carriage_returns_is_no_one_line_site():
    before = "def scale(a):\r    return a\r\r\rx = scale(\r    1)\r"
    after = before.replace("scale(a)", "scale(a, b)")
    plan = plan_next_edits([before], after, "python")
    assert plan is not None and plan.change.kind == "signature"
    assert [(after[s.start:s.end], s.single_line) for s in plan.sites] == [("\r    1", False)]

"""gofmt writes a Go `switch` / `select` statement's `case` lines at the depth of the statement
itself. The body planned after its `{` was one step deeper, as for any block, so every `case` a
model wrote (at gofmt's depth) was pushed one tab past it, and so was one the user had typed at
the right depth on the blank line below. Other blocks, and other languages' switches (whose
style varies), keep one step."""
import pytest

from dllm_lsp.planner.spans import plan_span
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"

SWITCH = "package p\n\nfunc f(x int) int {\n\tswitch x {‸\n\t}\n\treturn 0\n}\n"
SWITCH_ONE_LINE = "package p\n\nfunc f(x int) int {\n\tswitch x {‸}\n\treturn 0\n}\n"
TYPE_SWITCH = "package p\n\nfunc f(v any) {\n\tswitch t := v.(type) {‸\n\t}\n}\n"
SELECT = "package p\n\nfunc f(ch chan int) {\n\tselect {‸\n\t}\n}\n"
TYPED_AT_CASE_DEPTH = "package p\n\nfunc f(x int) int {\n\tswitch x {\n\t‸\n\t}\n\treturn 0\n}\n"


def plan_at(source: str, language_id: str = "go"):
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    snapshot = Snapshot.parse(text, language_id)
    assert snapshot.tree is not None and snapshot.error_count() == 0
    return text, plan_span(snapshot, cursor)


def shown_file(source: str, completion: str, language_id: str = "go") -> str | None:
    text, plan = plan_at(source, language_id)
    shown = finish(plan, completion)
    return None if shown is None else text[:plan.replace_start] + shown + text[plan.replace_end:]


@pytest.mark.parametrize("source, header", [
    (SWITCH, "\tswitch x {"), (SWITCH_ONE_LINE, "\tswitch x {"),
    (TYPE_SWITCH, "\tswitch t := v.(type) {"), (SELECT, "\tselect {"),
])
def test_a_case_block_body_is_at_the_headers_depth(source, header):
    _, plan = plan_at(source)
    assert plan.kind == "block_body" and not plan.single_line
    assert plan.indent == "\t"          # the header's own indentation: `case` goes there


def test_cases_the_model_writes_at_gofmts_depth_stay_there():
    completion = "\n\tcase 1:\n\t\treturn 1\n\tdefault:\n\t\treturn 2"
    assert shown_file(SWITCH, completion) == (
        "package p\n\nfunc f(x int) int {\n\tswitch x {\n\tcase 1:\n\t\treturn 1\n\tdefault:\n\t\treturn 2"
        "\n\t}\n\treturn 0\n}\n")
    assert shown_file(SELECT, "\n\tcase v := <-ch:\n\t\t_ = v") == (
        "package p\n\nfunc f(ch chan int) {\n\tselect {\n\tcase v := <-ch:\n\t\t_ = v\n\t}\n}\n")
    assert shown_file(SWITCH_ONE_LINE, "\n\tcase 1:\n\t\treturn 1\n\t") == (
        "package p\n\nfunc f(x int) int {\n\tswitch x {\n\tcase 1:\n\t\treturn 1\n\t}\n\treturn 0\n}\n")


def test_a_case_typed_at_gofmts_depth_is_not_pushed_deeper():
    # the blank line under the header, indented by the user to the `case` depth; the model
    # writes the line from its start (token healing gives it the typed tab)
    assert shown_file(TYPED_AT_CASE_DEPTH, "\tcase 1:\n\t\treturn 1") == (
        "package p\n\nfunc f(x int) int {\n\tswitch x {\n\tcase 1:\n\t\treturn 1\n\t}\n\treturn 0\n}\n")


@pytest.mark.parametrize("language_id, source, indent", [
    ("go", "package p\n\nfunc f(x int) {\n\tif x > 0 {‸\n\t}\n}\n", "\t\t"),          # other Go blocks
    ("go", "package p\n\nfunc f(x int) {\n\tswitch x {\n\tcase 1:‸\n\t}\n}\n", "\t\t"),  # a case's body
    ("javascript", "function f(x) {\n  switch (x) {‸\n  }\n}\n", "    "),
    ("c", "int f(int x) {\n  switch (x) {‸\n  }\n}\n", "    "),
    ("java", "class A {\n  void f(int x) {\n    switch (x) {‸\n    }\n  }\n}\n", "      "),
])
def test_other_blocks_keep_one_step(language_id, source, indent):
    _, plan = plan_at(source, language_id)
    assert plan.kind == "block_body" and plan.indent == indent

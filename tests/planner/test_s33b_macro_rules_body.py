"""The body of a Rust `macro_rules!` rule between braces (`($x:expr) => {‸};`) is a token tree to
the grammar, not a block: it was planned as one-line `arguments`, so a multi-line body (what such
bodies mostly are) was refused. It is a block body now, filled like `fn f() {‸}`. A macro call's
`m!{‸}` and a rule's `=> (‸)` stay one line.

Real tree-sitter parses, plans and post-processing; the model's text is written by hand."""
import pytest

from dllm_lsp.planner.spans import plan_span
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"
RULE = "macro_rules! m {\n    ($x:expr) => {‸};\n}\n"


def plan_at(source: str):
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    snapshot = Snapshot.parse(text, "rust")
    assert snapshot.error_count() == 0
    return text, plan_span(snapshot, cursor)


@pytest.mark.parametrize("source", [RULE, "macro_rules! m {\n    ($x:expr) => {‸}\n}\n",
                                    "macro_rules! m {\n    () => {‸};\n    ($x:expr) => { $x };\n}\n"])
def test_a_rules_braced_body_is_a_block(source):
    _, plan = plan_at(source)
    assert (plan.kind, plan.single_line, plan.indent, plan.closer_indent) == ("block_body", False, "        ", "    ")


@pytest.mark.parametrize("source", ["fn f() {\n    m!{‸};\n}\n", "macro_rules! m {\n    ($x:expr) => (‸);\n}\n",
                                    "macro_rules! m {\n    ({‸}) => { 1 };\n}\n"])
def test_macro_calls_parentheses_and_patterns_stay_one_line(source):
    _, plan = plan_at(source)
    assert plan.kind == "arguments" and plan.single_line


def test_a_multi_line_macro_body_is_shown():
    text, plan = plan_at(RULE)
    shown = finish(plan, "\n        let y = $x;\n        y + 1\n    ")
    assert shown is not None
    assert text[:plan.replace_start] + shown + text[plan.replace_end:] == \
        "macro_rules! m {\n    ($x:expr) => {\n        let y = $x;\n        y + 1\n    };\n}\n"

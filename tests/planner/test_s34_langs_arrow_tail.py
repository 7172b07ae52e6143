"""The cursor after a `=>` that ends its line, in Rust (a match arm) and JavaScript / TypeScript
(an arrow function), is planned as an `arrow_tail`: a line tail that may run over several lines
(a `{` block), with the typed blank healed as on any line tail. It was a one-line `line_tail`, so
a block answer was cut to its `{`. Elsewhere the plan is as before."""
import pytest

from dllm_lsp.planner.spans import PlannerSettings, plan_span
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"


def plan_at(language_id: str, source: str):
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    return plan_span(Snapshot.parse(text, language_id), cursor)


@pytest.mark.parametrize("language_id, source, healed", [
    ("rust", "fn f(x: i32) -> i32 {\n    match x {\n        1 => ‸\n        _ => 0,\n    }\n}\n", " "),
    ("rust", "fn f(x: i32) -> i32 {\n    match x {\n        1 =>‸\n    }\n}\n", ""),
    ("javascript", "const f = (x) => ‸\n", " "),
    ("typescript", "function g() {\n  const f = (x: number) => ‸\n}\n", " "),
    ("typescriptreact", "const f = () => ‸\n", " "),
    ("javascriptreact", "xs.map((x) =>‸\n);\n", ""),
])
def test_an_arrow_at_a_lines_end_may_take_a_block(language_id, source, healed):
    plan = plan_at(language_id, source)
    assert plan.kind == "arrow_tail" and not plan.single_line
    assert plan.request.slots[0].max_tokens == PlannerSettings().max_span_tokens
    assert plan.healed == healed and plan.typed_prefix == "" and plan.line_rest == ""


@pytest.mark.parametrize("language_id, source", [
    ("javascript", "xs.map((x) => ‸);\n"),                                       # mid-line
    ("javascript", "// a => ‸\n"),                                               # a comment
    ("javascript", "const s = `a => ‸\n`;\n"),                                   # a string
    ("rust", "fn f(x: i32) -> i32 {\n    match x {\n        1 => ‸\n            x + 1,\n    }\n}\n"),   # its body below
    ("python", "f = lambda x: x => ‸\n"),                                        # no such arrow
    ("c", "int a = b => ‸\n"),
])
def test_other_arrows_are_line_tails_as_before(language_id, source):
    plan = plan_at(language_id, source)
    assert plan.kind == "line_tail" and plan.single_line

"""Mid-line, a one-line completion must not leave a string open that neither it nor the rest of the
line closes (docs/planner.md, post-processing rule 5), also when that string swallows a closer the
rest of the line has: the count of what is left open then stayed the same, and the completion was
shown (a probe typing in Rust and Go, `if self.‸}` + `get_name == "`, `h.count+‸}` + `'`)."""
import pytest

from dllm_lsp.planner.spans import PlannerSettings, plan_span
from dllm_lsp.postprocess import finish
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"

CASES = [
    # (language, source, the model's text, what is shown)
    ("rust", "fn f() {\n    if self.‸}\n", 'get_name == "', None),
    ("go", "func f() {\n\th.count+‸}\n", "'", None),
    ("javascript", "function f() {\n  const s = x + ‸}\n", '"abc', None),
    ("c", "int f(void) { return g(‸); }\n", '"x', None),
    # strings the completion closes, or the rest of the line closes, still pass
    ("rust", "fn f() {\n    if self.‸}\n", "ready", "ready"),
    ("javascript", "function f() {\n  const s = x + ‸}\n", '"abc"', '"abc"'),
    ("python", 'x = "‸"\n', "abc", "abc"),
    ("c", "int f(void) { return g(‸); }\n", '"x"', '"x"'),
]


@pytest.mark.parametrize("language_id, source, completion, expected", CASES,
                         ids=[f"{c[0]}-{c[2]!r}" for c in CASES])
def test_a_string_left_open_mid_line_is_not_shown(language_id, source, completion, expected):
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    plan = plan_span(Snapshot.parse(text, language_id), cursor, PlannerSettings(heal_whitespace=False))
    assert plan.single_line
    assert finish(plan, completion) == expected

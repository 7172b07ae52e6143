"""A `switch` body whose first `case` the model writes on the `{` line (`switch (x) {‸` +
` case 1: ...`) and its next lines at their depth in the file. The first line went to the body's
depth (one step under the `switch`) whatever the model's other labels said: `case 1:` at 8
columns over a `default:` at 4, or over its own `return 1;` at 8. The first label now goes on its
own line where the model's lines put its labels: at its next label's depth, else one step above
its first statement, between the `switch`'s depth and the body's.

Real tree-sitter, the real pipeline (plan, post-processing); the model's answer is written by hand."""
import pytest

from dllm_lsp import pipeline
from dllm_lsp.engine.types import InfillResult
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"


def shown_file(language_id: str, source: str, answer: str) -> str | None:
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    plan = pipeline.plan(Snapshot.parse(text, language_id), cursor)
    assert plan.span.kind == "block_body"
    shown = plan.finish(InfillResult([[answer]], steps=1, tokens_committed=1, latency_ms=0.0))
    return None if shown is None else text[:shown.start] + shown.text + text[shown.end:]


C = "int f(int x) {\n    switch (x) {‸\n    }\n    return 0;\n}\n"
C_AT_SWITCH = "int f(int x) {\n    switch (x) {\n    case 1:\n        return 1;\n    default:\n        return 0;\n    }\n    return 0;\n}\n"
C_DEEPER = "int f(int x) {\n    switch (x) {\n        case 1:\n            return 1;\n        default:\n            return 0;\n    }\n    return 0;\n}\n"

CASES = [
    # (language, source, the model's answer, the file shown)
    # labels at the switch's depth (the Linux kernel's style): the first one too
    ("c", C, " case 1:\n        return 1;\n    default:\n        return 0;\n    }", C_AT_SWITCH),
    ("c", C, " case 1: return 1;\n    default: return 0;",
     "int f(int x) {\n    switch (x) {\n    case 1: return 1;\n    default: return 0;\n    }\n    return 0;\n}\n"),
    # no other label: one step above its statement
    ("c", C, " case 1:\n        return 1;",
     "int f(int x) {\n    switch (x) {\n    case 1:\n        return 1;\n    }\n    return 0;\n}\n"),
    ("c", "int f(int x) {\n    switch (x) {‸}\n    return 0;\n}\n",        # `{‸}`
     " case 1:\n        return 1;\n    default:\n        return 0;\n    ", C_AT_SWITCH),
    ("javascript", "function f(x) {\n  switch (x) {‸\n  }\n}\n", " case 1:\n    return 1;\n  default:\n    return 0;\n  }",
     "function f(x) {\n  switch (x) {\n  case 1:\n    return 1;\n  default:\n    return 0;\n  }\n}\n"),
    # labels a step deeper than the switch: there, as before
    ("c", C, " case 1:\n            return 1;\n        default:\n            return 0;\n    }", C_DEEPER),
    ("java", "class A {\n  int f(int x) {\n    switch (x) {‸\n    }\n  }\n}\n",
     " case 1:\n        return 1;\n      default:\n        return 0;",
     "class A {\n  int f(int x) {\n    switch (x) {\n      case 1:\n        return 1;\n      default:\n        return 0;\n    }\n  }\n}\n"),
    # Go: the planned depth is gofmt's, the switch's own
    ("go", "package p\n\nfunc f(x int) int {\n\tswitch x {‸\n\t}\n\treturn 0\n}\n", " case 1:\n\t\treturn 1\n\tdefault:\n\t\treturn 2",
     "package p\n\nfunc f(x int) int {\n\tswitch x {\n\tcase 1:\n\t\treturn 1\n\tdefault:\n\t\treturn 2\n\t}\n\treturn 0\n}\n"),
    # a lone label line: at the body's depth, as before
    ("c", C, " case 1: return 1;",
     "int f(int x) {\n    switch (x) {\n        case 1: return 1;\n    }\n    return 0;\n}\n"),
]


@pytest.mark.parametrize("language_id, source, answer, expected", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_the_first_case_goes_where_the_models_labels_go(language_id, source, answer, expected):
    assert shown_file(language_id, source, answer) == expected


def test_a_label_shallower_than_the_switch_is_not_followed():
    # the model's next lines from column 0 (`default:` left of the `switch`): the first label
    # stays at the body's depth, as before
    shown = shown_file("c", C, " case 1:\n    return 1;\ndefault:\n    return 0;")
    assert shown is not None and "\n        case 1:\n" in shown

"""After a `=>` that ends its line (a Rust match arm `1 => ‸`, a JavaScript / TypeScript arrow
function `(x) => ‸`) the answer is an expression or a `{` block. The cursor was planned as a
one-line line tail, so a block answer was cut to its `{` (or, before `_ => 0,`, not shown at all).
A block is shown whole now, up to the line that closes it, under the cursor's line; an expression
answer is still finished as one line.

Real tree-sitter, the real pipeline (plan, post-processing); the model's answer is written by
hand, as the engine hands it back (it writes the blank typed after `=>` itself: token healing)."""
import pytest

from dllm_lsp import pipeline
from dllm_lsp.engine.types import InfillResult
from dllm_lsp.syntax.snapshot import Snapshot

CURSOR = "‸"


def completion(language_id: str, source: str, answer: str):
    text, cursor = source.replace(CURSOR, ""), source.index(CURSOR)
    plan = pipeline.plan(Snapshot.parse(text, language_id), cursor)
    return text, plan, plan.finish(InfillResult([[answer]], steps=1, tokens_committed=1, latency_ms=0.0))


def shown_file(language_id: str, source: str, answer: str) -> str | None:
    text, _, shown = completion(language_id, source, answer)
    return None if shown is None else text[:shown.start] + shown.text + text[shown.end:]


ARM = "fn f(x: i32) -> i32 {\n    match x {\n        1 => ‸\n        _ => 0,\n    }\n}\n"
ARM_LAST = "fn f(x: i32) -> i32 {\n    match x {\n        1 => ‸\n    }\n}\n"
ARM_SHOWN = "fn f(x: i32) -> i32 {\n    match x {\n        1 => {\n            let y = x * 2;\n            y + 1\n        }\n{rest}    }\n}\n"

BLOCKS = [
    # (language, source, the model's answer, the file shown)
    # the model writes the block's lines at their depth in the file ...
    ("rust", ARM, " {\n            let y = x * 2;\n            y + 1\n        }",
     ARM_SHOWN.replace("{rest}", "        _ => 0,\n")),
    # ... or from column 0; and goes on with the next arm, which is not the block's
    ("rust", ARM_LAST, " {\n    let y = x * 2;\n    y + 1\n}\n        2 => 3,", ARM_SHOWN.replace("{rest}", "")),
    # lines written no deeper than the block's `}`: one step under the arm
    ("rust", ARM, " {\nlet y = x * 2;\ny + 1\n}", ARM_SHOWN.replace("{rest}", "        _ => 0,\n")),
    ("javascript", "const f = (x) => ‸\n", " {\n  const y = x * 2;\n  return y + 1;\n};",
     "const f = (x) => {\n  const y = x * 2;\n  return y + 1;\n};\n"),
    ("typescript", "function g() {\n  const f = (x: number) => ‸\n  return f;\n}\n",
     " {\n    return x + 1;\n  };", "function g() {\n  const f = (x: number) => {\n    return x + 1;\n  };\n  return f;\n}\n"),
    ("typescriptreact", "const f = (x: number) => ‸\n", " ({\n  a: x,\n});", "const f = (x: number) => ({\n  a: x,\n});\n"),
    ("javascript", "function g() {\n\tconst f = (x) => ‸\n}\n", " {\n\t\treturn x + 1;\n\t}",     # the file's tabs
     "function g() {\n\tconst f = (x) => {\n\t\treturn x + 1;\n\t}\n}\n"),
]


@pytest.mark.parametrize("language_id, source, answer, expected", BLOCKS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BLOCKS)])
def test_a_block_after_an_arrow_is_shown_whole(language_id, source, answer, expected):
    _, plan, shown = completion(language_id, source, answer)
    assert plan.span.kind == "arrow_tail" and not plan.span.single_line
    assert shown_file(language_id, source, answer) == expected
    # the server re-checks a suggestion typed through as a fresh one: the block passes its own check
    assert shown.passes_finish()


@pytest.mark.parametrize("language_id, source, answer, expected", [
    # an expression: its first line, as a one-line line tail
    ("rust", ARM, " x + 1,\n        2 => 3,", "fn f(x: i32) -> i32 {\n    match x {\n        1 => x + 1,\n        _ => 0,\n    }\n}\n"),
    ("javascript", "const f = (x) => ‸\n", " x + 1;\nconst g = 2;", "const f = (x) => x + 1;\n"),
    # a block that never closes (the model ran out of tokens): its first line, as before
    ("javascript", "const f = (x) => ‸\n", " {\n  const y = x * 2;", "const f = (x) => {\n"),
])
def test_other_answers_after_an_arrow_are_one_line(language_id, source, answer, expected):
    assert shown_file(language_id, source, answer) == expected


@pytest.mark.parametrize("answer", [
    " {\n  return x +;\n}",       # the parse check refuses it
    " {\n  return x;\n}),",       # its line that closes it closes a `)` nothing opened
])
def test_a_block_that_breaks_the_file_is_not_shown_whole(answer):
    # its first line alone is judged, as before
    assert shown_file("javascript", "const f = (x) => ‸\n", answer) == "const f = (x) => {\n"

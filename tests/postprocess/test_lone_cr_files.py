"""Files whose lines end in a lone CR (classic Mac): planned on LSP's lines, shown with CRs."""
import pytest

from dllm_lsp import pipeline
from dllm_lsp.engine.types import InfillResult, StepState
from dllm_lsp.syntax.snapshot import Snapshot


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_the_blank_line_in_a_class_is_a_block_body_whatever_ends_its_lines(newline):
    """The planner's line rules split at LF: a CR file was one line to them, and the blank line
    under `class A:` got a line tail."""
    text = f"class A:{newline}    {newline}"
    plan = pipeline.plan(Snapshot.parse(text, "python"), len(f"class A:{newline}    "))
    assert plan.span.kind == "block_body"


def test_a_multi_line_completion_in_a_lone_cr_file_ends_its_lines_in_cr():
    text = "def f(x):\r    \r\rprint(f(1))\r"
    cursor = len("def f(x):\r    ")
    snapshot = Snapshot.parse(text, "python")
    plan = pipeline.plan(snapshot, cursor)   # the blanks before the cursor are the model's to write (healed)
    completion = plan.finish(InfillResult([["    y = x + 1\n    return y"]], steps=1, tokens_committed=1,
                                          latency_ms=0.0))
    assert completion is not None and completion.snapshot is snapshot
    assert completion.text == "y = x + 1\r    return y"
    shown = text[:completion.start] + completion.text + text[completion.end:]
    assert "\n" not in shown and Snapshot.parse(shown, "python").error_count() == 0


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_each_streamed_step_of_a_completion_ends_its_lines_as_the_final_text_does(newline):
    # dllm/inlineCompletion's $/progress reports showed LF lines in a CRLF or CR file, then the final
    # text with the file's line breaks.
    text = f"def f(x):{newline}    {newline}{newline}print(f(1)){newline}"
    plan = pipeline.plan(Snapshot.parse(text, "python"), len(f"def f(x):{newline}    "))
    raw = "    y = x + 1\n    return y"
    streamed = plan.step_state(StepState(3, 8, [[raw]], 0.5, 0)).slot_texts[0][0]
    final = plan.finish(InfillResult([[raw]], steps=1, tokens_committed=1, latency_ms=0.0)).text
    assert streamed == final == f"y = x + 1{newline}    return y"

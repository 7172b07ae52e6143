"""Random sources, cursors and completions (brackets, quotes, CRLF, tabs, non-ASCII, lone
surrogates) in every language: plan + finish never crash and always keep their contract."""
import random

import pytest

from dllm_lsp.planner.documents import ParsedDocument
from dllm_lsp.planner.spans import PlannerSettings, plan_span
from dllm_lsp.postprocess import finish

PIECES = ["x", " ", "\n", "\r\n", "\t", "é", "(", ")", "{", "}", "[", "]", '"', "'", "`", ":", ";", "def ",
          "if ", "then", "end", "return", "日本", "\ud800", "    ", "#", "//", "/*", "*/", "--", "<pad>"]
LANGUAGES = ["python", "javascript", "typescript", "typescriptreact", "rust", "go", "c", "cpp", "java", "lua",
             "plaintext"]


@pytest.mark.parametrize("language_id", LANGUAGES)
def test_random_inputs_keep_the_contract(language_id):
    rng = random.Random(language_id)
    other = [("file:///other.py", "def helper(x):\n    return x + 1\n")]
    for _ in range(120):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40)))
        cursor = rng.randint(0, len(text))
        plan = plan_span(ParsedDocument(text, language_id), cursor,
                         PlannerSettings(context_chars=rng.choice([40, 6000])), other)
        assert plan.replace_start <= plan.replace_end == cursor
        assert plan.typed_prefix == text[plan.replace_start: cursor]
        assert plan.request.suffix == text[cursor: plan.context_end]
        raw = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
        if rng.random() < 0.5:
            raw = plan.typed_prefix + raw
        result = finish(plan, text, raw)
        if result is None:
            continue
        assert result.strip() and result.startswith(plan.typed_prefix) and result != plan.typed_prefix
        assert "<pad>" not in result
        if plan.single_line:
            assert "\n" not in result and result == result.rstrip()

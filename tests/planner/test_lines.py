"""The line helpers every language falls back to."""
import pytest

from dllm_lsp.planner.lines import line_break_near


@pytest.mark.parametrize("text, expected", [
    ("a = 1\nb = \n", "\n"),
    ("a = 1\r\nb = \r\n", "\r\n"),
    ("a = 1\rb = \r", "\r"),      # classic Mac: lines inserted here end in CR, not LF
    ("b = ", "\n"),               # one line: no break to copy
    ("a = 1\r\nb = ", "\r\n"),    # the last line has none: that of the line before
])
def test_text_the_server_inserts_uses_the_line_break_near_it(text, expected):
    assert line_break_near(text, text.index("b = ") + 4) == expected

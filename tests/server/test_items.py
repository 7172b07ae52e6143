"""What the classic completion menu shows of a completion."""
import pytest

from dllm_lsp.server.items import item_label


@pytest.mark.parametrize("text, label", [
    ("width * height", "width * height"),
    ("\n    return x\n    y = 2", "return x …"),   # starts on a new line: once labelled with every line
    ("if x:\r\n        pass", "if x: …"),
    ("\n    ", "↵"),
    ("", ""),
])
def test_the_label_is_one_line(text, label):
    assert item_label(text) == label

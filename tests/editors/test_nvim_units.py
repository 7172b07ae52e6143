"""The Neovim plugin's pure pieces, run in both Neovims (no server): how much "accept a word" and
"accept a line" take, multi-line ghost text drawn as inline text plus virtual lines and read back,
the "(2/3)" hint of cycling left out of the text read back, and the part of a suggestion still to
insert."""
from __future__ import annotations

import json
import subprocess

import pytest

from . import tools

pytestmark = [pytest.mark.editor, pytest.mark.timeout(60)]

UNITS = tools.REPO / "tests" / "editors" / "nvim" / "units.lua"


@pytest.mark.parametrize("version", ["0.12", "0.11"])
def test_plugin_units(version):
    nvim = tools.nvim(version)
    out = subprocess.run([str(nvim), "--headless", "--clean", "-l", str(UNITS), str(tools.REPO / "editors" / "nvim")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["word"] == ["foo", "  foo", "(", "   ", "x_1"]
    assert got["line"] == ["a + b", "\n    return x", "\nlast", "one"]
    assert got["drawn"] == {"count": 1, "pos": "inline", "virt_lines": 2}
    assert got["read"] == " # doc\n    y = x\n    return y"
    assert got["cleared"] is True
    assert got["hinted"] == {"read": " # doc\n    return x", "hint": "(2/3)"}
    assert got["hinted_one_line"] == {"read": " x", "hint": "(1/2)"}
    assert got["no_hint"] is True
    assert got["remainder"] == "ue + 1"
    assert got["mismatch"] is True
    # the server's CRLF and CR line breaks as Neovim's lines take them (a ^M was left on each line)
    assert got["unix_text"] == "a\n  b\nc\nd"
    assert [i["insertText"] for i in got["unix_answer"]["items"]] == ["x\ny", {"kind": "snippet", "value": "p\nq"}]
    assert got["stream_items"] == "one\ntwo"
    assert got["win"] == {"current": True, "other": True, "back": True}
    assert got["accept_one"] == ["f(a, y", "z)"]       # the edit under the cursor, not the first on the line
    assert got["unmapped"] == [True, True, True]
    assert "no-such-dllm-lsp-command is not an executable" in got["missing_cmd"]

"""VS Code end to end: code-server 4.100.3 (VS Code 1.100) with the built .vsix, driven in
Chromium by playwright-core: open a file, type, wait for the ghost text (compared with what the
server answers for the same text), accept it with Tab, check the saved file; and the
"Fill holes" refactoring."""
from __future__ import annotations

import pytest

from . import tools
from .code_server import CodeServer
from .conftest import apply_text_edits, edits_of, server_completion, server_fill_holes
from .expected import ghost_of

pytestmark = [pytest.mark.editor, pytest.mark.timeout(420)]

BEFORE = "alpha beta gamma\nthe quick brown fox \n"
TYPED = "jumps "
LINE = "the quick brown fox " + TYPED


def test_ghost_text_then_tab_accepts(tmp_path, editor_model):
    text = BEFORE.replace("fox \n", f"fox {TYPED}\n")
    answer = server_completion(editor_model, text, 1, len(LINE))
    expected = ghost_of(answer, LINE, len(LINE))
    assert expected.strip(), f"the model completes nothing here, nothing to check: {answer}"

    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "demo.txt").write_text(BEFORE, encoding="utf-8")
    shots = tools.screenshot_dir(tmp_path)
    with CodeServer(workspace, editor_model, tmp_path / "home") as vscode:
        seen = vscode.play({
            "kind": "complete", "file": "demo.txt", "line": 2, "column": len("the quick brown fox ") + 1,
            "typed": TYPED, "expectGhost": expected, "timeoutMs": 60000,
            "statusBarContains": ["dllm", editor_model.name],
            "screenshot": str(shots / "vscode-ghost-text.png"),
            "failureScreenshot": str(tmp_path / "failure.png"),
        })
    assert seen["ok"], seen
    assert seen["ghost"] == expected, seen
    # The server streams (dllm/inlineCompletion): the ghost text was redrawn as the denoiser went.
    assert len(seen["ghostHistory"]) >= 2, seen["ghostHistory"]
    assert "cpu" in seen["statusBar"], seen["statusBar"]
    assert seen.get("accepted"), seen
    saved = (workspace / "demo.txt").read_text(encoding="utf-8")
    assert saved == "alpha beta gamma\n" + LINE + expected + "\n"


HOLES = "def area(w, h):\n    pass\n\n\ndef scale(x):\n    return x * 2\n"


def test_fill_holes_code_action(tmp_path, editor_model):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = workspace / "shapes.py"
    path.write_text(HOLES, encoding="utf-8")
    # What the server makes of the hole (apply=false), asked directly; the editor must show the same.
    expected = server_fill_holes(editor_model, path, "python", 1, 4)
    if expected.get("unsupported"):
        pytest.skip("this server does not advertise the dllm.fillHoles command")
    with CodeServer(workspace, editor_model, tmp_path / "home") as vscode:
        seen = vscode.play({
            "kind": "fillHoles", "file": "shapes.py", "line": 2, "column": 5, "timeoutMs": 120000,
            "statusBarContains": ["dllm", editor_model.name],
            "screenshot": str(tools.screenshot_dir(tmp_path) / "vscode-fill-holes.png"),
            "failureScreenshot": str(tmp_path / "failure.png"),
        })
    assert seen["ok"], seen
    assert seen["action"].startswith("Fill 1 hole with dllm"), seen["action"]
    saved = path.read_text(encoding="utf-8")
    if expected["edit"]:
        assert seen["outcome"] == {"edited": True}, seen
        assert saved == apply_text_edits(HOLES, edits_of(expected["edit"], path.as_uri()))
    else:
        # The server kept the hole (a random model's text does not parse): the user is told why.
        reason = expected["sites"][0]["reason"]
        assert "no hole filled" in seen["outcome"]["message"] and reason in seen["outcome"]["message"], seen
        assert saved == HOLES

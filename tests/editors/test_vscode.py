"""VS Code end to end: code-server 4.100.3 (VS Code 1.100) with the built .vsix, driven in
Chromium by playwright-core: open a file, type, wait for the ghost text (compared with what the
server answers for the same text), accept it with Tab, check the saved file; the "Fill holes"
refactoring; next edits after a rename; the server's alternatives cycled with Alt+] / Alt+[. One code-server serves the module; each test opens its
own browser window (and so its own extension host and language server)."""
from __future__ import annotations

import pytest

from . import tools
from .code_server import CodeServer
from .conftest import (SLOW_STREAM, TcpServer, apply_text_edits, edits_of, server_completion, server_fill_holes,
                       server_inline)
from .expected import ghost_of

pytestmark = [pytest.mark.editor, pytest.mark.timeout(420)]

BEFORE = "alpha beta gamma\nthe quick brown fox \n"
TYPED = "jumps "
LINE = "the quick brown fox " + TYPED
SLOW_STREAM_SETTINGS = {f"dllm.{k}": v for k, v in SLOW_STREAM.items()}   # conftest.SLOW_STREAM says why
HOLES = "def area(w, h):\n    pass\n\n\ndef scale(x):\n    return x * 2\n"
RENAME = "def area(width, height):\n    return width * height * width\n"


@pytest.fixture(scope="module")
def vscode(tmp_path_factory, editor_model):
    home = tmp_path_factory.mktemp("code-server")
    workspace = home / "ws"
    workspace.mkdir()
    (workspace / "demo.txt").write_text(BEFORE, encoding="utf-8")
    (workspace / "shapes.py").write_text(HOLES, encoding="utf-8")
    (workspace / "area.py").write_text(RENAME, encoding="utf-8")
    with CodeServer(workspace, editor_model, home, settings=SLOW_STREAM_SETTINGS) as server:
        yield server


def play(vscode, tmp_path, editor_model, scenario: dict) -> dict:
    seen = vscode.play(dict(
        scenario, statusBarContains=["dllm", editor_model.name],
        failureScreenshot=str(tmp_path / "failure.png"),
    ))
    assert seen["ok"], seen
    return seen


def test_ghost_text_then_tab_accepts(vscode, tmp_path, editor_model):
    text = BEFORE.replace("fox \n", f"fox {TYPED}\n")
    answer = server_inline(editor_model, text, 1, len(LINE), SLOW_STREAM)
    expected = ghost_of(answer, LINE, len(LINE))
    assert expected.strip(), f"the model completes nothing here, nothing to check: {answer}"

    seen = play(vscode, tmp_path, editor_model, {
        "kind": "complete", "file": "demo.txt", "line": 2, "column": len("the quick brown fox ") + 1,
        "typed": TYPED, "expectGhost": expected, "timeoutMs": 60000,
        "screenshot": str(tools.screenshot_dir(tmp_path) / "vscode-ghost-text.png"),
    })
    assert seen["ghost"] == expected, seen
    # The server streams (dllm/inlineCompletion): the ghost text was redrawn as the denoiser went.
    assert len(seen["ghostHistory"]) >= 2, (seen["ghostHistory"], seen.get("log"))
    assert "cpu" in seen["statusBar"], seen["statusBar"]
    assert seen.get("accepted"), seen
    saved = (vscode.workspace / "demo.txt").read_text(encoding="utf-8")
    assert saved == "alpha beta gamma\n" + LINE + expected + "\n"


def test_fill_holes_code_action(vscode, tmp_path, editor_model):
    path = vscode.workspace / "shapes.py"
    # What the server makes of the hole (apply=false), asked directly; the editor must show the same.
    expected = server_fill_holes(editor_model, path, "python", 1, 4, options=SLOW_STREAM)
    if expected.get("unsupported"):
        pytest.skip("this server does not advertise the dllm.fillHoles command")
    seen = play(vscode, tmp_path, editor_model, {
        "kind": "fillHoles", "file": "shapes.py", "line": 2, "column": 5, "timeoutMs": 120000,
        "screenshot": str(tools.screenshot_dir(tmp_path) / "vscode-fill-holes.png"),
    })
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


def test_next_edits_after_a_rename(vscode, tmp_path, editor_model):
    seen = play(vscode, tmp_path, editor_model, {
        "kind": "nextEdits", "file": "area.py", "line": 1, "column": 10, "typed": "w", "timeoutMs": 60000,
        "screenshot": str(tools.screenshot_dir(tmp_path) / "vscode-next-edits.png"),
    })
    assert "2 next edits" in seen["statusBar"], seen
    assert seen["preview"] == ['" → w"', '" → w"'], seen["preview"]
    # Alt+] took the reference nearest the cursor; the other one's range moved with the edit.
    assert "1 next edit" in seen["afterAcceptOne"], seen
    assert "return w * height * width" in seen["textAfterAcceptOne"], seen
    assert (vscode.workspace / "area.py").read_text(encoding="utf-8") == "def area(w, height):\n    return w * height * w\n"


def test_tcp_server_manual_trigger_and_toggle(tmp_path, editor_model):
    """dllm.server.tcp: the extension connects to a running server instead of starting one. Also
    the manual trigger (Alt+\\) and the status-bar on/off toggle."""
    text = BEFORE.replace("fox \n", f"fox {TYPED}\n")
    expected = ghost_of(server_completion(editor_model, text, 1, len(LINE)), LINE, len(LINE))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "demo.txt").write_text(BEFORE, encoding="utf-8")
    with TcpServer(editor_model, tmp_path / "server.log", token="vscode-test-token") as server:   # docs/deploy.md
        settings = {"dllm.server.tcp": server.address, "dllm.server.token": "vscode-test-token"}
        with CodeServer(workspace, editor_model, tmp_path / "home", settings) as vscode:
            seen = play(vscode, tmp_path, editor_model, {
                "kind": "triggerAndToggle", "file": "demo.txt", "line": 2, "column": len("the quick brown fox ") + 1,
                "typed": TYPED, "expectGhost": expected, "timeoutMs": 60000,
            })
    assert seen["automatic"] and seen["manual"], seen
    assert seen["statusBarOff"].endswith("(off)"), seen
    assert seen["ghostWhenOff"] is None, seen
    assert "(off)" not in seen["statusBarOn"], seen


def test_alternatives_cycle_with_alt_brackets(tmp_path, editor_model):
    """dllm.alternatives: 3: the ghost text is the greedy suggestion first (the one without
    alternatives); Alt+] shows the server's other items in turn and comes back round, Alt+[ goes
    back one, and Tab inserts the suggestion shown. The first Alt+] is pressed while the server is
    still denoising (a slow stream, the press at the first ghost text): it shows the second item
    once the answer with the alternatives has come, instead of being spent on the report's one."""
    text = BEFORE.replace("fox \n", f"fox {TYPED}\n")
    expected = ghost_of(server_inline(editor_model, text, 1, len(LINE), SLOW_STREAM), LINE, len(LINE))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "demo.txt").write_text(BEFORE, encoding="utf-8")
    # The toolbar always shown: it counts the items VS Code holds, which the driver reads.
    settings = {**SLOW_STREAM_SETTINGS, "dllm.alternatives": 3, "editor.inlineSuggest.showToolbar": "always"}
    with CodeServer(workspace, editor_model, tmp_path / "home", settings) as vscode:
        seen = play(vscode, tmp_path, editor_model, {
            "kind": "cycle", "file": "demo.txt", "line": 2, "column": len("the quick brown fox ") + 1,
            "typed": TYPED, "expectGhost": expected, "presses": 3, "timeoutMs": 60000,
        })
    shown = seen["shown"]
    # At most 3 items: after at most 3 presses Alt+] is back at the first, and no two items in a
    # row of the cycle are the same text (the server offers distinct ones).
    assert shown[0] == expected and len(set(shown)) >= 2, seen
    count = shown.index(expected, 1)
    assert count in (2, 3) and shown[count:] == shown[:len(shown) - count], seen
    assert seen["back"] == shown[-2], seen
    # The toolbar follows: "k/N" after k-1 presses, N the number of distinct items.
    total = int(seen["counts"][0].split("/")[1])
    assert total == count and seen["counts"] == [f"{i % total + 1}/{total}" for i in range(1, len(shown))], seen
    # The first press came while VS Code held the stream's report alone, not yet the alternatives.
    assert seen["countAtPress"] != f"1/{total}", seen
    saved = (workspace / "demo.txt").read_text(encoding="utf-8")
    assert saved == "alpha beta gamma\n" + LINE + seen["back"] + "\n", seen


def test_restarting_twice_in_a_row_leaves_one_server_running(tmp_path, editor_model):
    """The restart command pressed twice (or a settings file saved twice): overlapping restarts each
    started a client, so two servers ran on, the second client's start failed ("command
    'dllm.fillHoles' already exists") and the left-over one told the status bar "stopped"."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "demo.txt").write_text(BEFORE, encoding="utf-8")
    with CodeServer(workspace, editor_model, tmp_path / "home") as vscode:
        seen = play(vscode, tmp_path, editor_model, {
            "kind": "restartTwice", "file": "demo.txt", "serversCommand": vscode.servers_command(),
        })
    assert len(seen["servers"]) == 1, seen
    assert "server: running" in seen["tooltip"], seen
    assert not [n for n in seen["notifications"] if "dllm" in n], seen

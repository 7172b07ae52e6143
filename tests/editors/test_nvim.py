"""Neovim end to end: the plugin in Neovim 0.12-dev (native vim.lsp.inline_completion, fed streamed
refinements) and 0.11.4 (ghost text drawn by the plugin with extmarks), each running in a real
terminal against the real server and a model; keys are typed, the ghost text is read back and
compared with what the server answers for the same text, then accepted and saved."""
from __future__ import annotations

import time

import pytest

from . import tools
from .conftest import SLOW_STREAM, TcpServer, apply_text_edits, edits_of, server_completion, server_fill_holes
from .expected import ghost_of, leading_printable, line, word
from .nvim_session import NvimSession

pytestmark = [pytest.mark.editor, pytest.mark.timeout(240)]

VERSIONS = [pytest.param("0.12", id="nvim-0.12"), pytest.param("0.11", id="nvim-0.11")]
BEFORE = "alpha beta gamma\nthe quick brown fox \n"
TYPED = "jumps "
LINE = "the quick brown fox " + TYPED


@pytest.fixture(scope="module")
def expected(editor_model):
    """The server's completion after typing TYPED at the end of line 2 of BEFORE."""
    text = BEFORE.replace("fox \n", f"fox {TYPED}\n")
    answer = server_completion(editor_model, text, 1, len(LINE))
    ghost = ghost_of(answer, LINE, len(LINE))
    assert ghost.strip(), f"the model completes nothing here, the test cannot check ghost text: {answer}"
    return ghost


def open_session(version, tmp_path, model, file_text=BEFORE, name="demo.txt", tcp=None, token=None,
                 server_options=None):
    nvim = tools.nvim(version)
    (tmp_path / name).write_text(file_text, encoding="utf-8")
    session = NvimSession(nvim, tmp_path, name, model, tcp=tcp, token=token, server_options=server_options)
    session.wait(lambda s: s["attached"] and s["status"] and s["status"].get("loaded"), timeout=90,
                 what="the dllm client to attach and the model to load")
    return session


def type_on_line_2(session):
    session.keys("G", "A")
    session.wait(lambda s: s["mode"].startswith("i"), what="insert mode")
    session.type(TYPED)


@pytest.mark.parametrize("version", VERSIONS)
def test_ghost_text_streams_then_tab_accepts(version, tmp_path, editor_model, expected):
    with open_session(version, tmp_path, editor_model) as nv:
        type_on_line_2(nv)
        state = nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r}")
        assert state["version"].startswith(version)
        assert state["stats"]["native"] is (version == "0.12")
        # The server streams: the last completion arrived as at least one $/progress report first.
        assert state["stats"]["streaming"] is True
        assert state["stats"]["last_reports"] >= 1
        # The statusline item shows the server's model and device.
        nv.wait_screen(f"dllm · {editor_model.name} · cpu")
        # The ghost text is on the screen, right after the typed text on the cursor's line (as far
        # as the window is wide, and where the text is printable ASCII).
        screen = nv.screen()
        cursor_line = next(l for l in screen.splitlines() if "the quick brown fox jumps" in l)
        drawn = cursor_line.split("fox " + TYPED, 1)[1].rstrip()
        printable = leading_printable(expected.split("\n")[0]).rstrip()
        n = min(len(printable), len(drawn))
        assert n >= min(3, len(printable)) and drawn[:n] == printable[:n], screen
        nv.screenshot(tools.screenshot_dir(tmp_path) / f"nvim-{version}-ghost-text.png", tools.chromium())

        nv.keys("Tab")
        state = nv.wait(lambda s: s["lines"][1] != LINE, what="the suggestion to be inserted")
        assert "\n".join(state["lines"][1:]).rstrip("\n") == (LINE + expected).rstrip("\n")
        assert state["ghost"] is None
        nv.keys("Escape", ":w", "Enter")
        nv.wait(lambda s: (tmp_path / "demo.txt").read_text(encoding="utf-8") != BEFORE, what="the file to be saved")
        saved = (tmp_path / "demo.txt").read_text(encoding="utf-8")
        assert saved == "alpha beta gamma\n" + LINE + expected + "\n"


@pytest.mark.parametrize("version", VERSIONS)
def test_accept_a_word_then_a_line(version, tmp_path, editor_model, expected):
    with open_session(version, tmp_path, editor_model) as nv:
        type_on_line_2(nv)
        nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r}")
        first_word = word(expected)
        nv.keys("M-w")
        state = nv.wait(lambda s: s["lines"][1] != LINE, what="one word to be inserted")
        assert state["lines"][1] == LINE + first_word
        rest = expected[len(first_word):]
        if not rest:
            return
        # Accepting a line takes the rest of the current line of the suggestion still shown (0.11
        # keeps the suggestion; 0.12 asks again, and the server answers for the new text).
        state = nv.wait(lambda s: s["ghost"], what="the rest of the suggestion")
        shown = state["ghost"]
        if version == "0.11":
            assert shown == rest
        nv.keys("M-l")
        state = nv.wait(lambda s: s["lines"][1] != LINE + first_word, what="one line to be inserted")
        taken = line(shown)
        assert "\n".join(state["lines"][1:]).startswith(LINE + first_word + taken)


@pytest.mark.parametrize("version", VERSIONS)
def test_cycle_through_alternatives_then_accept_one(version, tmp_path, editor_model, expected):
    """With the server option `alternatives: 3` the answer holds more than one suggestion: the first
    drawn is the greedy one (as without alternatives), Alt-] shows the next with its "(2/N)" hint,
    wrapping around, Alt-[ goes back, and Tab inserts the one shown."""
    with open_session(version, tmp_path, editor_model, server_options={"alternatives": 3}) as nv:
        type_on_line_2(nv)
        nv.wait(lambda s: s["ghost"] == expected, what=f"the greedy suggestion {expected!r} first")
        assert nv.state()["hint"] is None   # no hint before the user cycles
        nv.keys("M-]")
        state = nv.wait(lambda s: (s["hint"] or "").startswith("(2/"), what="the second suggestion")
        count = int(state["hint"][3:-1])
        assert 2 <= count <= 3, state["hint"]
        shown = [expected, state["ghost"]]
        for index in range(3, count + 1):
            nv.keys("M-]")
            state = nv.wait(lambda s: s["hint"] == f"({index}/{count})", what=f"suggestion {index}")
            shown.append(state["ghost"])
        assert len(set(shown)) == count and all(shown), shown   # the server offers distinct ones
        nv.keys("M-]")
        nv.wait(lambda s: s["hint"] == f"(1/{count})" and s["ghost"] == expected, what="back to the first")
        nv.keys("M-[")
        nv.wait(lambda s: s["hint"] == f"({count}/{count})" and s["ghost"] == shown[-1], what="the last")
        nv.keys("Tab")
        state = nv.wait(lambda s: s["lines"][1] != LINE, what="the suggestion shown to be inserted")
        assert "\n".join(state["lines"][1:]).rstrip("\n") == (LINE + shown[-1]).rstrip("\n")
        assert state["ghost"] is None


@pytest.mark.parametrize("version", VERSIONS)
def test_cycle_pressed_while_the_answer_streams(version, tmp_path, editor_model):
    """Alt-] pressed while the server is still denoising (what is drawn is a streamed report, one
    item, not yet the answer with its alternatives) is kept and applied when the answer comes: the
    second suggestion is drawn with its "(2/N)" hint, and insert mode is kept, instead of the press
    being spent on a list of one or falling through to the key's own meaning."""
    with open_session(version, tmp_path, editor_model, server_options={**SLOW_STREAM, "alternatives": 3}) as nv:
        type_on_line_2(nv)
        # Polled tightly and cheaply (the ghost text alone, not the whole state): the press has to
        # land within the stream's few hundred milliseconds.
        deadline = time.monotonic() + 60
        while not nv.lua("require('dllm').ghost_text(vim.api.nvim_get_current_buf()) ~= nil"):
            assert time.monotonic() < deadline, f"no ghost text; screen:\n{nv.screen()}"
            time.sleep(0.01)
        nv.keys("M-]")
        state = nv.wait(lambda s: (s["hint"] or "").startswith("(2/"), what="the second suggestion")
        assert state["mode"].startswith("i") and state["ghost"], state
        # The press came while the answer was still coming (the stream is long), and was kept.
        assert state["stats"]["deferred_cycles"] == 1, state["stats"]


# Characters of 2, 3 and 4 UTF-8 bytes before the cursor; the last is 2 UTF-16 units (a surrogate
# pair): the server's ranges (UTF-16 by default) and Neovim's byte columns disagree by different
# amounts on this line.
# The cursor is mid-word, so the server's range starts before it, at "jum".
WIDE_BEFORE = "alpha beta gamma\nthe naïve café ☕ 𝛼 fox \n"
WIDE_TYPED = "jum"
WIDE_LINE = "the naïve café ☕ 𝛼 fox " + WIDE_TYPED


@pytest.mark.parametrize("version", VERSIONS)
def test_ghost_text_after_wide_characters(version, tmp_path, editor_model):
    """The suggestion is drawn and inserted at the cursor when the line holds characters of
    several UTF-8 / UTF-16 widths before it and the server's range starts before the cursor
    (positions converted both ways)."""
    text = WIDE_BEFORE.replace("fox \n", f"fox {WIDE_TYPED}\n")
    answer = server_completion(editor_model, text, 1, len(WIDE_LINE))
    assert answer["replace_from"]["col"] - 1 == len(WIDE_LINE) - len(WIDE_TYPED), answer
    expected = ghost_of(answer, WIDE_LINE, len(WIDE_LINE))
    assert expected.strip(), f"the model completes nothing here, nothing to check: {answer}"
    with open_session(version, tmp_path, editor_model, file_text=WIDE_BEFORE) as nv:
        nv.keys("G", "A")
        nv.wait(lambda s: s["mode"].startswith("i"), what="insert mode")
        nv.type(WIDE_TYPED)
        state = nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r}")
        assert state["lines"][1] == WIDE_LINE
        nv.keys("Tab")
        state = nv.wait(lambda s: s["lines"][1] != WIDE_LINE, what="the suggestion to be inserted")
        assert "\n".join(state["lines"][1:]).rstrip("\n") == (WIDE_LINE + expected).rstrip("\n")


@pytest.mark.parametrize("version", VERSIONS)
def test_checkhealth_reports_server_model_device(version, tmp_path, editor_model):
    with open_session(version, tmp_path, editor_model) as nv:
        report = nv.lua("(function() vim.cmd('checkhealth dllm'); "
                        "return vim.api.nvim_buf_get_lines(0, 0, -1, false) end)()")
        text = "\n".join(report)
        assert "server command:" in text and "-m dllm_lsp serve --stdio" in text, text
        assert f"model: {editor_model.name}" in text, text
        assert "device: cpu" in text, text
        assert "model loaded" in text, text
        assert ("native" in text) is (version == "0.12"), text


HOLES = "def area(w, h):\n    pass\n\n\ndef scale(x):\n    return x * 2\n"


@pytest.fixture(scope="module")
def expected_fill(editor_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("holes") / "shapes.py"
    path.write_text(HOLES, encoding="utf-8")
    return server_fill_holes(editor_model, path, "python", 1, 4)


@pytest.mark.parametrize("version", VERSIONS)
def test_fill_holes_command(version, tmp_path, editor_model, expected_fill):
    if expected_fill.get("unsupported"):
        pytest.skip("this server does not advertise the dllm.fillHoles command")
    with open_session(version, tmp_path, editor_model, file_text=HOLES, name="shapes.py") as nv:
        offered = nv.lua("vim.lsp.get_clients({name='dllm'})[1].server_capabilities.executeCommandProvider.commands")
        assert "dllm.fillHoles" in offered
        nv.keys("2G", "0", "w")   # cursor on `pass`
        nv.keys(":DllmFillHoles", "Enter")
        if expected_fill["edit"]:
            uri = (tmp_path / "shapes.py").as_uri()
            want = apply_text_edits(HOLES, edits_of(expected_fill["edit"], uri))
            nv.wait(lambda s: "\n".join(s["lines"]) + "\n" == want, timeout=120, what="the holes to be filled")
        else:
            # The server kept the hole (a random model's text does not parse): the user is told why.
            reason = expected_fill["sites"][0]["reason"]
            messages = ""
            for _ in range(600):
                messages = nv.lua("vim.api.nvim_exec2('messages', {output = true}).output")
                if "no hole filled" in messages:
                    break
                time.sleep(0.2)
            assert "no hole filled" in messages and reason in messages, messages
            assert "\n".join(nv.state()["lines"]) + "\n" == HOLES


def test_connects_to_a_tcp_server(tmp_path, editor_model, expected):
    """setup({tcp = 'HOST:PORT', token = ...}): no server is started, the one listening is used, and
    the token it requires goes in initializationOptions (docs/deploy.md)."""
    with TcpServer(editor_model, tmp_path / "server.log", token="nvim-test-token") as server:
        with open_session("0.12", tmp_path, editor_model, tcp=server.address, token="nvim-test-token") as nv:
            command = nv.lua("type(vim.lsp.get_clients({name='dllm'})[1].config.cmd)")
            assert command == "function"   # vim.lsp.rpc.connect, not a process
            type_on_line_2(nv)
            nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r} over TCP")


RENAME = "def area(width, height):\n    return width * height * width\n"


def test_next_edits_after_a_rename(tmp_path, editor_model):
    """Rename a parameter, ask for next edits: the preview shows the two other references; accept
    the nearest one, dismiss the other."""
    with open_session("0.12", tmp_path, editor_model, file_text=RENAME, name="area.py") as nv:
        nv.keys(":DllmNextEdits", "Enter")   # the server compares with the versions it has seen
        nv.wait(lambda s: s["mode"] == "n", what="normal mode")
        nv.keys("1G", "0", "f", "w", "c", "i", "w")
        nv.type("w")
        nv.keys("Escape")
        nv.wait(lambda s: s["lines"][0] == "def area(w, height):", what="the rename")
        nv.keys(":DllmNextEdits", "Enter")
        count = 0
        for _ in range(300):
            count = nv.lua("require('dllm.next_edits').count(0)")
            if count:
                break
            time.sleep(0.2)
        assert count == 2
        preview = nv.lua("vim.tbl_map(function(m) return m[4].virt_text[1][1] end, "
                         "vim.api.nvim_buf_get_extmarks(0, require('dllm.next_edits').ns, 0, -1, {details = true}))")
        assert preview == [" → w", " → w"]
        nv.wait_screen(f"dllm · {editor_model.name} · cpu")   # the statusline item, once loaded
        screen = nv.wait_screen("→ w")
        assert any("return width * height * width" in l and l.rstrip().endswith("→ w") for l in screen.splitlines()), screen
        nv.screenshot(tools.screenshot_dir(tmp_path) / "nvim-next-edits.png", tools.chromium())
        nv.keys(":DllmNextEditsAcceptOne", "Enter")   # the one nearest the cursor
        state = nv.wait(lambda s: s["lines"][1] != "    return width * height * width", what="one edit")
        assert state["lines"] == ["def area(w, height):", "    return w * height * width"]
        assert nv.lua("require('dllm.next_edits').count(0)") == 1
        nv.keys(":DllmNextEditsDismiss", "Enter")
        for _ in range(100):
            if nv.lua("require('dllm.next_edits').count(0)") == 0:
                break
            time.sleep(0.1)
        assert nv.lua("require('dllm.next_edits').count(0)") == 0
        assert nv.lua("#vim.api.nvim_buf_get_extmarks(0, require('dllm.next_edits').ns, 0, -1, {})") == 0
        assert nv.state()["lines"] == ["def area(w, height):", "    return w * height * width"]


@pytest.mark.parametrize("version", VERSIONS)
def test_toggle_off_and_on(version, tmp_path, editor_model, expected):
    """:DllmToggle: no suggestion while off; after turning it on, typing brings one again."""
    with open_session(version, tmp_path, editor_model) as nv:
        nv.keys(":DllmToggle", "Enter")
        nv.wait(lambda s: s["stats"]["enabled"] is False, what="suggestions off")
        type_on_line_2(nv)
        time.sleep(4)   # long enough for a suggestion to arrive, were it on (the tests above see one in less)
        state = nv.state()
        assert state["ghost"] is None and state["lines"][1] == LINE
        nv.keys("Escape", ":DllmToggle", "Enter")
        nv.wait(lambda s: s["stats"]["enabled"] is True, what="suggestions on")
        nv.keys("A")
        nv.type(" ")
        nv.keys("BSpace")   # back to the text the expected answer is for
        nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r} after turning on")


@pytest.mark.parametrize("version", VERSIONS)
def test_backspace_while_a_suggestion_is_shown_raises_nothing(version, tmp_path, editor_model, expected):
    """0.12 redraws its current item on every cursor move at the item's range start: a Backspace
    that took the line below it raised "Invalid 'col': out of range" (a hit-ENTER prompt)."""
    with open_session(version, tmp_path, editor_model) as nv:
        type_on_line_2(nv)
        nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r}")
        nv.keys("BSpace")
        nv.wait(lambda s: s["lines"][1] == LINE[:-1], what="the Backspace")
        time.sleep(1)
        messages = nv.expr("execute('messages')")
        assert "out of range" not in messages and "Error" not in messages, messages
        nv.type(" ")                 # the next answer is drawn as usual
        nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r} again")


@pytest.mark.parametrize("version", VERSIONS)
def test_typing_the_suggestions_first_character_then_tab_inserts_it_once(version, tmp_path, editor_model,
                                                                          expected):
    """0.12 accepted through Neovim's own accept, which writes the item over its range: that ends
    where the cursor was when the answer came, so Tab right after typing the suggestion's first
    character wrote that character twice."""
    first = expected[0]
    if not first.isprintable():
        pytest.skip(f"the suggestion starts with {first!r}, which the terminal cannot type")
    with open_session(version, tmp_path, editor_model) as nv:
        type_on_line_2(nv)
        nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r}")
        nv.type(first)
        nv.keys("Tab")
        state = nv.wait(lambda s: s["lines"][1] != LINE + first and s["lines"][1] != LINE,
                        what="the suggestion to be inserted")
        assert "\n".join(state["lines"][1:]).rstrip("\n") == (LINE + expected).rstrip("\n")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_buffer_split_in_two_windows_completes_at_the_cursor_of_the_current_one(version, tmp_path,
                                                                                   editor_model, expected):
    """bufwinid gives the first window that shows a buffer: with the file split in two, the
    request, the ghost text and the insertion used the other window's cursor (line 1, column 0)."""
    with open_session(version, tmp_path, editor_model) as nv:
        nv.keys(":split", "Enter", "C-w", "j")
        nv.wait(lambda s: nv.lua("#vim.api.nvim_list_wins()") == 2, what="the split")
        type_on_line_2(nv)
        nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r} in the lower window")
        nv.keys("Tab")
        state = nv.wait(lambda s: s["lines"][1] != LINE, what="the suggestion to be inserted")
        assert state["lines"][0] == "alpha beta gamma"
        assert "\n".join(state["lines"][1:]).rstrip("\n") == (LINE + expected).rstrip("\n")


@pytest.mark.parametrize("version", VERSIONS)
def test_auto_trigger_off_asks_only_when_triggered(version, tmp_path, editor_model, expected):
    """On 0.12 Neovim asks on every keystroke, and `auto_trigger = false` was not consulted there."""
    with open_session(version, tmp_path, editor_model) as nv:
        nv.lua("(function() require('dllm.config').options.auto_trigger = false return true end)()")
        type_on_line_2(nv)
        time.sleep(4)   # long enough for a suggestion to arrive, were it asked for
        assert nv.state()["ghost"] is None
        nv.lua("(function() require('dllm').trigger() return true end)()")
        nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r} after trigger()")

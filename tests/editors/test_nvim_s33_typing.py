"""Neovim plugin, used as a user types (real nvim in tmux, real server over stdio, the tiny model):
an accepted suggestion is part of the insert (`.` repeats it, `u` takes it back in one step), and
a file above the server's size limit is said on one line, without the hit-ENTER prompt."""
from __future__ import annotations

import time

import pytest

from . import tools
from .conftest import server_completion
from .expected import ghost_of, word
from .nvim_session import NvimSession
from .test_nvim import BEFORE, LINE, TYPED, VERSIONS, open_session, type_on_line_2

pytestmark = [pytest.mark.editor, pytest.mark.timeout(240)]

FIRST = "alpha beta gamma"


@pytest.fixture(scope="module")
def expected(editor_model):
    """The server's completion after typing TYPED at the end of line 2 of BEFORE (as test_nvim's)."""
    text = BEFORE.replace("fox \n", f"fox {TYPED}\n")
    ghost = ghost_of(server_completion(editor_model, text, 1, len(LINE)), LINE, len(LINE))
    assert ghost.strip(), "the model completes nothing here, the tests cannot check ghost text"
    return ghost


def text_of(state: dict) -> str:
    return "\n".join(state["lines"]) + "\n"


@pytest.mark.parametrize("version", VERSIONS)
def test_dot_repeats_the_typed_and_the_accepted_text_and_u_takes_the_accepted_back(version, tmp_path,
                                                                                   editor_model, expected):
    """The suggestion was written with nvim_buf_set_text, outside the insert Neovim records: `.` on
    another line repeated "jumps " alone, and `u` took back the typed text with the accepted one."""
    options = "{vim.bo.autoindent, vim.bo.formatoptions, vim.bo.indentkeys, vim.o.eventignore}"
    with open_session(version, tmp_path, editor_model) as nv:
        before = nv.lua(options)
        type_on_line_2(nv)
        nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r}")
        nv.keys("Tab")
        accepted = f"{FIRST}\n{LINE}{expected}\n"
        nv.wait(lambda s: text_of(s) == accepted, what="the suggestion to be inserted")
        # nothing of how it went in is left on the screen (the `<C-R>=` command line)
        assert "DllmInsertText" not in nv.screen()
        nv.keys("Escape")
        nv.wait(lambda s: s["mode"] == "n", what="normal mode")
        nv.keys("1G", ".")
        repeated = f"{FIRST}{TYPED}{expected}\n{LINE}{expected}\n"
        nv.wait(lambda s: text_of(s) == repeated, what="`.` to repeat the typed and the accepted text")
        nv.keys("u")
        nv.wait(lambda s: text_of(s) == accepted, what="`u` to take the repeat back")
        nv.keys("u")
        nv.wait(lambda s: text_of(s) == f"{FIRST}\n{LINE}\n", what="`u` to take the accepted text back alone")
        nv.keys("u")
        nv.wait(lambda s: text_of(s) == BEFORE, what="`u` to take the typed text back")
        # the options the text went in with are the buffer's again
        assert nv.lua(options) == before


@pytest.mark.parametrize("version", VERSIONS)
def test_dot_repeats_a_word_accepted(version, tmp_path, editor_model, expected):
    """Accepting a word: `.` repeats the typed text and that word, and the rest of the suggestion is
    still drawn after it."""
    with open_session(version, tmp_path, editor_model) as nv:
        type_on_line_2(nv)
        nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r}")
        first_word = word(expected)
        nv.keys("M-w")
        state = nv.wait(lambda s: s["lines"][1] != LINE, what="one word to be inserted")
        assert state["lines"][1] == LINE + first_word
        if version == "0.11" and expected[len(first_word):]:
            nv.wait(lambda s: s["ghost"] == expected[len(first_word):], what="the rest still drawn")
        nv.keys("Escape")
        nv.wait(lambda s: s["mode"] == "n", what="normal mode")
        nv.keys("1G", ".")
        state = nv.wait(lambda s: s["lines"][0] != FIRST, what="`.` to repeat")
        assert state["lines"][0] == FIRST + TYPED + first_word


@pytest.mark.parametrize("version", VERSIONS)
def test_a_file_above_the_size_limit_is_said_without_a_prompt(version, tmp_path, editor_model):
    """The server refuses a file above 4 Mi characters with a window/showMessage longer than the
    window: Neovim's handler echoed it and waited at "Press ENTER or type command to continue"."""
    filler = "filler text for a big file\n"
    big = filler * (4 * 1024 * 1024 // len(filler) + 100)
    (tmp_path / "big.txt").write_text(big, encoding="utf-8")
    # Its state is read with small expressions: dllm_test_state() sends every line (4 MiB) each time.
    with NvimSession(tools.nvim(version), tmp_path, "big.txt", editor_model) as nv:
        said = ""
        for _ in range(450):
            try:
                said = nv.lua("vim.api.nvim_exec2('messages', {output = true}).output")
            except RuntimeError:   # nvim not listening yet
                pass
            if "limit" in said:
                break
            time.sleep(0.2)
        assert "big.txt" in said and "limit" in said, said
        time.sleep(0.5)   # the prompt, were it coming, is up by now
        screen = nv.screen()
        assert "Press ENTER" not in screen, screen
        assert nv.lua("vim.api.nvim_get_mode().mode") == "n"   # "r" at the hit-ENTER prompt
        message = next(l for l in screen.splitlines() if "big.txt:" in l)
        assert message.startswith("dllm: no completions for big.txt"), screen
        # typing goes on as usual; a request on the refused file (0.11 asks on every keystroke) says
        # nothing more
        nv.keys("g", "g", "O")
        nv.type("abc")
        typed = "{vim.api.nvim_buf_get_lines(0, 0, 1, false)[1], vim.api.nvim_get_mode().mode}"
        for _ in range(150):
            if nv.lua(typed) == ["abc", "i"]:
                break
            time.sleep(0.2)
        time.sleep(1)
        assert nv.lua(typed) == ["abc", "i"], nv.screen()
        assert "Press ENTER" not in nv.screen()
        # the whole text is in :checkhealth dllm
        report = "\n".join(nv.lua("(function() vim.cmd('stopinsert | checkhealth dllm'); "
                                  "return vim.api.nvim_buf_get_lines(0, 0, -1, false) end)()"))
        assert "the server said" in report and "big.txt: " in report and "Mi limit" in report, report


@pytest.mark.parametrize("version", VERSIONS)
def test_checkhealth_says_why_the_model_did_not_load(version, tmp_path):
    """dllm/status has `family: null` while the model loads and when its load failed; the report
    concatenated that (vim.NIL) and raised, so the load error was never shown."""
    (tmp_path / "demo.txt").write_text(BEFORE, encoding="utf-8")
    with NvimSession(tools.nvim(version), tmp_path, "demo.txt", tmp_path / "no-such-model") as nv:
        state = nv.wait(lambda s: s["attached"] and s["status"] and s["status"].get("error"), timeout=90,
                        what="the server to say the model did not load")
        assert state["status"].get("family") is None   # null (0.12 hands it over as vim.NIL)
        # The server says the failed load twice, one message right after the other: each fits the
        # message area, but a second echo before a redraw went on a line of its own, and two lines
        # waited for ENTER as one long one did.
        time.sleep(1)
        assert "Press ENTER" not in nv.screen(), nv.screen()
        assert nv.lua("vim.api.nvim_get_mode().mode") == "n"
        report = "\n".join(nv.lua("(function() vim.cmd('checkhealth dllm'); "
                                  "return vim.api.nvim_buf_get_lines(0, 0, -1, false) end)()"))
        assert "Failed to run healthcheck" not in report, report
        assert "model error:" in report, report

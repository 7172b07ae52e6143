"""Neovim plugin fixes found by using it as a user would (real nvim in tmux, real server over stdio,
the tiny model): a file without a filetype got no client, a killed server could only come back by
re-opening the buffer (refused with unsaved changes), and on 0.12 a second open file took the
requests of the one typed in."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from .nvim_session import NvimSession
from .conftest import server_completion
from .expected import ghost_of
from .test_nvim import BEFORE, LINE, TYPED, VERSIONS, open_session, type_on_line_2
from . import tools

pytestmark = [pytest.mark.editor, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def expected(editor_model):
    """The server's completion after typing TYPED at the end of line 2 of BEFORE (as test_nvim's)."""
    text = BEFORE.replace("fox \n", f"fox {TYPED}\n")
    ghost = ghost_of(server_completion(editor_model, text, 1, len(LINE)), LINE, len(LINE))
    assert ghost.strip(), "the model completes nothing here, the tests cannot check ghost text"
    return ghost


def server_pids(nv: NvimSession) -> list[int]:
    """The processes nvim started: the server (`python -m dllm_lsp serve --stdio`)."""
    nvim_pid = nv.lua("vim.fn.getpid()")
    out = subprocess.run(["pgrep", "-P", str(nvim_pid)], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_file_without_a_filetype_gets_suggestions(version, tmp_path, editor_model):
    """`filetypes = nil` means every buffer, but vim.lsp.enable starts clients on FileType, which a
    file of an unknown extension (and a new unnamed buffer) never gets: no client attached."""
    nvim = tools.nvim(version)
    (tmp_path / "notes.zzz").write_text(BEFORE, encoding="utf-8")
    with NvimSession(nvim, tmp_path, "notes.zzz", editor_model) as nv:
        nv.wait(lambda s: s["attached"] and s["status"] and s["status"].get("loaded"), timeout=90,
                what="the dllm client to attach to a file without a filetype")
        assert nv.lua("vim.bo.filetype") == ""
        type_on_line_2(nv)
        state = nv.wait(lambda s: s["ghost"], what="a suggestion in the file without a filetype")
        shown = state["ghost"]
        nv.keys("Tab")
        state = nv.wait(lambda s: s["lines"][1] != LINE, what="the suggestion to be inserted")
        assert "\n".join(state["lines"][1:]).rstrip("\n") == (LINE + shown).rstrip("\n")
        nv.keys("Escape", ":enew", "Enter")
        nv.wait(lambda s: s["attached"] and s["lines"] == [""], what="the client in a new unnamed buffer")
        # One server for both: the client is reused, as vim.lsp.enable reuses it.
        assert nv.lua("#vim.lsp.get_clients({name = 'dllm'})") == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_restart_after_the_server_was_killed(version, tmp_path, editor_model, expected):
    """Neovim does not restart a server that exits, and `:e` (which would start one) is refused
    while the buffer has unsaved changes: :DllmRestart starts the client again for the open buffers,
    with the options of the last setup()."""
    with open_session(version, tmp_path, editor_model) as nv:
        nv.keys("1G", "A")
        nv.type("!")                       # an unsaved change
        nv.keys("Escape")
        pids = server_pids(nv)
        assert len(pids) == 1, pids
        os.kill(pids[0], signal.SIGKILL)
        # Neovim says the client quit; a message longer than the window waits for Enter (and holds
        # back the client's detach until then), as a user would press it.
        for _ in range(300):
            if "Press ENTER" in nv.screen():
                nv.keys("Enter")
            if nv.lua("#vim.lsp.get_clients({name = 'dllm'})") == 0:
                break
            time.sleep(0.2)
        nv.wait(lambda s: not s["attached"], what="the client to go with its server")
        nv.keys(":DllmRestart", "Enter")
        state = nv.wait(lambda s: s["attached"] and s["status"] and s["status"].get("loaded"), timeout=90,
                        what="the client to start again")
        assert state["lines"][0] == "alpha beta gamma!"   # the unsaved change is kept
        restarted = server_pids(nv)
        assert len(restarted) == 1 and restarted != pids, (pids, restarted)
        # Settings changed at run time (setup() again) take effect at a restart: the running client
        # is replaced by one with the new options.
        nv.lua("(function() require('dllm').setup({cmd = vim.lsp.config.dllm.cmd, debounce_ms = 50, "
               "native = vim.env.DLLM_NVIM_NATIVE ~= '0', server = {model = vim.env.DLLM_TEST_MODEL, "
               "device = 'cpu', alternatives = 2}}) return true end)()")
        assert nv.lua("vim.lsp.get_clients({name = 'dllm'})[1].config.init_options.alternatives") is None
        nv.keys(":DllmRestart", "Enter")
        alternatives = "vim.tbl_map(function(c) return c.config.init_options.alternatives or 0 end, " \
                       "vim.lsp.get_clients({name = 'dllm', bufnr = 0}))"
        for _ in range(300):
            if nv.lua(alternatives) == [2]:
                break
            time.sleep(0.2)
        assert nv.lua(alternatives) == [2]
        nv.wait(lambda s: s["attached"] and s["status"] and s["status"].get("loaded"), timeout=90,
                what="the client with the new options to load")
        nv.keys("1G", "A", "BSpace", "Escape")   # back to the text the expected answer is for
        nv.wait(lambda s: s["lines"][0] == "alpha beta gamma", what="the change undone")
        type_on_line_2(nv)
        nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r} from the new server")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_second_open_file_does_not_take_the_requests_of_the_one_typed_in(version, tmp_path, editor_model,
                                                                           expected):
    """Neovim 0.12-dev's inline completion listens to CursorMovedI in every buffer: with another
    file open, each keystroke also asked for that file at this cursor, and that request took the
    place of this buffer's (cancelled it), so no ghost text came."""
    (tmp_path / "other.txt").write_text("one\n", encoding="utf-8")
    with open_session(version, tmp_path, editor_model) as nv:
        nv.keys(":e other.txt", "Enter")
        nv.wait(lambda s: s["attached"] and s["lines"] == ["one"], what="the second file, attached")
        nv.keys(":b demo.txt", "Enter")
        nv.wait(lambda s: s["lines"][0] == "alpha beta gamma", what="back in the first file")
        type_on_line_2(nv)
        nv.wait(lambda s: s["ghost"] == expected, what=f"ghost text {expected!r} with a second file open")
        messages = nv.expr("execute('messages')")
        assert "Error" not in messages, messages

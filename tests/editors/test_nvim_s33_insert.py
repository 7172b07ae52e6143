"""dllm.insert in a real Neovim (both versions, no server): accepted text typed into buffers whose
indenting and formatting options would change typed text goes in as the suggestion says it, `.`
repeats it with the characters typed around it, and `u` takes it back in one step."""
from __future__ import annotations

import json
import subprocess

import pytest

from . import tools

pytestmark = [pytest.mark.editor, pytest.mark.timeout(60)]

# Run by `nvim --headless --clean -l`, with the plugin folder as its argument.
SCRIPT = r'''-- Runs inside `nvim --headless --clean -l SCRIPT PLUGIN_DIR` and prints one JSON object:
-- dllm.insert typing accepted text into buffers whose indenting and formatting options would
-- change typed text (Python's indentexpr, C's cindent, comment leaders, auto-wrap, expandtab),
-- then `.` and `u`.
vim.opt.runtimepath:prepend(arg[1])
vim.cmd('filetype plugin indent on')
local insert = require('dllm.insert')

vim.keymap.set('i', '<F2>', function()
  insert.at_cursor(vim.api.nvim_get_current_buf(), vim.api.nvim_get_current_win(), _G.TEXT, { delete = _G.DELETE })
end)

local function lines()
  return vim.api.nvim_buf_get_lines(0, 0, -1, false)
end

local out = {}
--- `keys` type up to the accept (<F2>) and after it, then <Esc>; `again` moves to where `.` repeats.
local function case(name, ft, start, keys, text, again, opts)
  opts = opts or {}
  vim.cmd('enew!')
  vim.bo.filetype = ft
  vim.bo.autoindent = true
  vim.bo.expandtab = true
  vim.bo.formatoptions = 'tcroql'
  vim.bo.textwidth = opts.textwidth or 0
  vim.api.nvim_buf_set_lines(0, 0, -1, false, start)
  local before = { vim.bo.autoindent, vim.bo.formatoptions, vim.bo.indentkeys, vim.bo.cinkeys, vim.o.eventignore }
  _G.TEXT, _G.DELETE = text, opts.delete
  vim.api.nvim_feedkeys(vim.keycode(keys .. '<Esc>'), 'xt', false)
  local r = { accepted = lines() }
  r.options_back = vim.deep_equal(before, { vim.bo.autoindent, vim.bo.formatoptions, vim.bo.indentkeys,
    vim.bo.cinkeys, vim.o.eventignore })
  vim.api.nvim_feedkeys(vim.keycode(again .. '.'), 'xt', false)
  r.repeated = lines()
  vim.api.nvim_feedkeys('u', 'xt', false)
  r.undo1 = lines()
  vim.api.nvim_feedkeys('u', 'xt', false)
  r.undo2 = lines()
  out[name] = r
end

-- Python: indentexpr would indent the lines after `if x:` again, `else:` is in indentkeys, `#`
-- lines continue as comments ('r').
case('python', 'python', { 'def f(x):', '    # note', '', 'y = 1' }, '2GAab<F2>cd',
  ' here\n    if x:\n        return 1\n    else:\n        return 2', '5G$')
-- C: cindent, `#` to column 0 (cinkeys 0#), `}` reindented; a Tab goes in as a Tab (expandtab on).
case('c', 'c', { 'int f() {', '    int a;', '}' }, '2GA<F2>',
  '\n    if (a) {\n\ta++; /* one */\n    }\n#define X 1', '$')
-- Auto-wrap at textwidth 20 would break the long line.
case('wrap', 'text', { 'start', 'end' }, '1GA<F2>', ' a line much longer than the textwidth of twenty', '2G$',
  { textwidth = 20 })
-- The range covers text after the cursor: one character deleted, the text typed.
case('replace', 'lua', { 'f(a]', 'g(b]' }, '1G$i<F2>', ', c)', '2G$', { delete = 1 })
io.stdout:write(vim.json.encode(out) .. '\n')
'''
PYTHON_ACCEPTED = ["def f(x):", "    # noteab here", "    if x:", "        return 1", "    else:",
                   "        return 2cd", "", "y = 1"]
C_ACCEPTED = ["int f() {", "    int a;", "    if (a) {", "\ta++; /* one */", "    }", "#define X 1", "}"]


@pytest.mark.parametrize("version", ["0.12", "0.11"])
def test_accepted_text_is_typed_as_given_and_repeated(version, tmp_path):
    nvim = tools.nvim(version)
    script = tmp_path / "insert.lua"
    script.write_text(SCRIPT, encoding="utf-8")
    out = subprocess.run([str(nvim), "--headless", "--clean", "-l", str(script), str(tools.REPO / "editors" / "nvim")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(case["options_back"] for case in got.values()), got

    # Python: no second indent from indentexpr, no "# " on the line after the comment, "else:" kept
    python = got["python"]
    assert python["accepted"] == PYTHON_ACCEPTED
    # `.` at the end of "    else:" types "ab", the accepted lines and "cd" again, the same lines
    assert python["repeated"] == PYTHON_ACCEPTED[:4] + ["    else:ab here", "    if x:", "        return 1",
                                                       "    else:", "        return 2cd"] + PYTHON_ACCEPTED[5:]
    assert python["undo1"] == PYTHON_ACCEPTED
    assert python["undo2"] == ["def f(x):", "    # noteab", "", "y = 1"]   # the accepted text alone

    # C: cindent and `#` to column 0 left alone, the Tab kept with expandtab on
    c = got["c"]
    assert c["accepted"] == C_ACCEPTED
    assert c["repeated"] == C_ACCEPTED[:6] + C_ACCEPTED[2:6] + ["}"]
    assert c["undo2"] == ["int f() {", "    int a;", "}"]

    # textwidth 20: the accepted line is not wrapped; the repeat is typed, and wraps as typing does
    wrap = got["wrap"]
    assert wrap["accepted"] == ["start a line much longer than the textwidth of twenty", "end"]
    assert wrap["repeated"][1:] == ["end a line much", "longer than the", "textwidth of twenty"]

    # a range past the cursor: the character it covers is deleted, in the same undo step
    replace = got["replace"]
    assert replace["accepted"] == ["f(a, c)", "g(b]"]
    assert replace["repeated"] == ["f(a, c)", "g(b, c)"]
    assert replace["undo2"] == ["f(a]", "g(b]"]

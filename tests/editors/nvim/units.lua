-- Runs inside `nvim --headless --clean -l units.lua PLUGIN_DIR` and prints one JSON object: the
-- plugin's pure pieces (partial accept chunks, ghost text drawing and reading back, the part of a
-- suggestion still to insert), checked by tests/editors/test_nvim_units.py.
vim.opt.runtimepath:prepend(arg[1])
local partial = require('dllm.partial')
local ghost = require('dllm.ghost')
local suggest = require('dllm.suggest')

local out = {}
out.word = {
  partial.word('foo(bar)'), partial.word('  foo bar'), partial.word('(bar)'), partial.word('   '),
  partial.word('x_1.y'),
}
out.line = { partial.line('a + b\nc'), partial.line('\n    return x\nmore'), partial.line('\nlast'), partial.line('one') }

-- Ghost text: a three-line suggestion drawn at the end of line 1 and read back.
local buf = vim.api.nvim_create_buf(true, false)
vim.api.nvim_set_current_buf(buf)
vim.api.nvim_buf_set_lines(buf, 0, -1, false, { 'def f(x):', '' })
ghost.draw(buf, 0, 9, ' # doc\n    y = x\n    return y', 'Comment')
local marks = vim.api.nvim_buf_get_extmarks(buf, ghost.ns, 0, -1, { details = true })
out.drawn = { count = #marks, pos = marks[1][4].virt_text_pos, virt_lines = #(marks[1][4].virt_lines or {}) }
out.read = ghost.read(buf)
ghost.clear(buf)
out.cleared = ghost.read(buf) == nil
-- With the "(2/3)" hint of cycling: drawn after the last line, left out of the text read back.
ghost.draw(buf, 0, 9, ' # doc\n    return x', 'Comment', ' (2/3)')
out.hinted = { read = ghost.read(buf), hint = ghost.hint(buf) }
ghost.draw(buf, 0, 9, ' x', 'Comment', ' (1/2)')
out.hinted_one_line = { read = ghost.read(buf), hint = ghost.hint(buf) }
ghost.clear(buf)
out.no_hint = ghost.hint(buf) == nil

-- What is still to insert: the typed part of the range is skipped; a replaced ')' after the cursor
-- is not drawn twice; a suggestion the buffer no longer agrees with gives nil.
vim.api.nvim_buf_set_lines(buf, 0, -1, false, { 'print(val)' })
vim.api.nvim_win_set_cursor(0, { 1, 9 }) -- after "print(val"
local item = {
  text = 'value + 1)',
  range = { start = { line = 0, character = 6 }, ['end'] = { line = 0, character = 10 } },
  encoding = 'utf-16',
}
out.remainder = suggest.remainder(buf, item)
item.text = 'other)'
out.mismatch = suggest.remainder(buf, item) == nil

-- The server writes the file's own line breaks (CRLF, CR); a buffer's lines hold none.
local util = require('dllm.util')
local stream = require('dllm.stream')
out.unix_text = util.unix_text('a\r\n  b\rc\nd')
out.unix_answer = util.unix_answer({ items = { { insertText = 'x\r\ny' }, { insertText = { kind = 'snippet', value = 'p\rq' } } } })
out.stream_items = stream.items({ items = { { insertText = 'one\r\ntwo', range = vim.NIL } } })[1].text

-- A buffer in two windows: the current one's, not the first one's.
vim.api.nvim_buf_set_lines(buf, 0, -1, false, { 'top', 'bottom' })
local first = vim.api.nvim_get_current_win()
vim.cmd('split')
local second = vim.api.nvim_get_current_win()
out.win = { current = util.win(buf) == second, other = second ~= first }
vim.api.nvim_set_current_win(first)
out.win.back = util.win(buf) == first
vim.cmd('only')

-- Next edits: of two edits on the cursor's line, "accept one" takes the one under the cursor.
local next_edits = require('dllm.next_edits')
vim.api.nvim_buf_set_lines(buf, 0, -1, false, { 'f(a, a)' })
next_edits.preview(buf, {
  { range = { start = { line = 0, character = 2 }, ['end'] = { line = 0, character = 3 } }, newText = 'x' },
  { range = { start = { line = 0, character = 5 }, ['end'] = { line = 0, character = 6 } }, newText = 'y\r\nz' },
}, 'utf-16')
vim.api.nvim_win_set_cursor(0, { 1, 5 })
next_edits.accept_one(buf)
out.accept_one = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
next_edits.dismiss(buf)

-- A key with nothing to accept does what it does without the plugin: an Alt chord is <Esc> and its key.
local dllm = require('dllm')
out.unmapped = { dllm._unmapped_keys('<M-l>') == vim.keycode('<Esc>l'), dllm._unmapped_keys('<A-w>') == vim.keycode('<Esc>w'),
  dllm._unmapped_keys('<Tab>') == vim.keycode('<Tab>') }

-- A server command that is not an executable is said at setup (Neovim only logs it).
local said = {}
vim.notify = function(msg) said[#said + 1] = msg end
dllm.setup({ cmd = { 'no-such-dllm-lsp-command' }, keymaps = false, filetypes = { 'no-such-filetype' } })
out.missing_cmd = said[1] or vim.NIL

io.stdout:write(vim.json.encode(out) .. '\n')

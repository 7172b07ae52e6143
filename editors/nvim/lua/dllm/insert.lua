-- Puts accepted text into the buffer as part of the insert the user is typing.
--
-- Written with nvim_buf_set_text (as Neovim 0.12's own inline completion accepts), the text is not
-- in the redo buffer: after accepting, <Esc>, another line and `.`, only the characters typed by
-- hand came back. Here the text goes in through `<C-R>=` (`:help i_CTRL-R_=`), whose result Neovim
-- takes as typed: it is recorded for `.` like typed text, and a `<C-G>u` before it makes `u` take
-- back the accepted text in one step, the characters typed before it staying.
--
-- Typed text gets the buffer's indenting and formatting (autoindent, indentkeys, comment leaders,
-- auto-wrap), which would change the suggestion: those options are off while it goes in, and a
-- line break is typed as NL followed by `0 CTRL-U 0 CTRL-D`, which takes away whatever indent
-- or comment leader the new line got, so a repeat (`.`, which re-types with the options on) makes
-- the same lines. Control characters (a Tab) go in after CTRL-V, literally.
local M = {}

-- NL, then `0` `CTRL-U` (back to the first non-blank, or the line start: the comment leader goes),
-- then `0` `CTRL-D` (the indent goes); the `0` keeps CTRL-U off column 0, where it joins lines.
local NEWLINE = '\n0' .. string.char(21) .. '0' .. string.char(4)
local CTRL_V = string.char(22)

-- Off while the text goes in; restored right after (or when insert mode is left, should the keys
-- that restore them have been flushed).
local NEUTRAL = { autoindent = false, smartindent = false, formatoptions = '', indentkeys = '', cinkeys = '' }
-- The text is not typed by the user: autocmds that react to typing (InsertCharPre can change the
-- character) or to the command line `<C-R>=` uses do not see it.
local IGNORED = 'InsertCharPre,CmdlineEnter,CmdlineChanged,CmdlineLeave,OptionSet'

local queued = nil ---@type string? what the next `<C-R>=DllmInsertText()` inserts
local pending = nil ---@type {bufnr: integer, options: table, eventignore: string, after: fun()?}?

-- `<C-R>=` evaluates an expression typed on its command line: a function of the plugin's, so no
-- text has to be typed there (a `v:lua.` would risk a user's cmdline abbreviation `v`).
vim.cmd([[
function! DllmInsertText() abort
  return v:lua.require'dllm.insert'.take()
endfunction
]])

--- The text `<C-R>=` inserts: called once, by DllmInsertText().
function M.take()
  local text = queued or ''
  queued = nil
  return text
end

--- `text` as the characters that type it.
function M.as_typed(text)
  return (text:gsub('%c', function(c)
    if c == '\n' then
      return NEWLINE
    end
    return CTRL_V .. c
  end))
end

local function restore()
  local p = pending
  pending = nil
  if not p then
    return
  end
  if vim.api.nvim_buf_is_valid(p.bufnr) then
    for name, value in pairs(p.options) do
      vim.bo[p.bufnr][name] = value
    end
  end
  vim.o.eventignore = p.eventignore
  return p
end

--- Run by the keys after the text: the options back, then the caller's `after`.
function M.done()
  local p = restore()
  if p and p.after then
    p.after()
  end
end

--- Whether text can be typed in: insert mode (not replace mode) in `bufnr`'s current window.
local function typing(bufnr)
  local mode = vim.api.nvim_get_mode()
  return not mode.blocking and mode.mode:sub(1, 1) == 'i' and vim.api.nvim_get_current_buf() == bufnr
end

--- Inserts `text` at the cursor of `win`, after deleting `delete` characters after it; runs
--- `after` once the text is in. In insert mode in the current window the text is typed (see the top
--- of this file), so `after` runs once the keys are processed; elsewhere (Neovim 0.12 accepts from a
--- scheduled callback: insert mode may have been left since) it is written directly.
function M.at_cursor(bufnr, win, text, opts)
  opts = opts or {}
  local delete = opts.delete or 0
  if typing(bufnr) and win == vim.api.nvim_get_current_win() then
    restore() -- a previous insertion whose closing keys were flushed (an error), should there be one
    local options = {}
    for name in pairs(NEUTRAL) do
      options[name] = vim.bo[bufnr][name]
    end
    pending = { bufnr = bufnr, options = options, eventignore = vim.o.eventignore, after = opts.after }
    vim.o.eventignore = vim.o.eventignore == '' and IGNORED or (vim.o.eventignore .. ',' .. IGNORED)
    for name, value in pairs(NEUTRAL) do
      vim.bo[bufnr][name] = value
    end
    queued = M.as_typed(text)
    local keys = '<C-G>u' .. string.rep('<Del>', delete) .. '<C-R>=DllmInsertText()<CR>'
      .. "<Cmd>lua require('dllm.insert').done()<CR>"
    -- 'i': before keys typed after the accepting one; 'n': the user's mappings do not apply.
    vim.api.nvim_feedkeys(vim.keycode(keys), 'ni', false)
    return
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(win))
  row = row - 1
  local erow, ecol = row, col
  if delete > 0 then
    -- `delete` characters reach at most `delete` lines down (a line end is one)
    local last = math.min(row + delete, vim.api.nvim_buf_line_count(bufnr) - 1)
    local below = vim.api.nvim_buf_get_lines(bufnr, row, last + 1, false)
    below[1] = below[1]:sub(col + 1)
    local gone = vim.fn.strcharpart(table.concat(below, '\n'), 0, delete, true)
    local lines = vim.split(gone, '\n', { plain = true })
    erow = row + #lines - 1
    ecol = (#lines == 1 and col or 0) + #lines[#lines]
  end
  local lines = vim.split(text, '\n', { plain = true })
  vim.api.nvim_buf_set_text(bufnr, row, col, erow, ecol, lines)
  vim.api.nvim_win_set_cursor(win, { row + #lines, (#lines == 1 and col or 0) + #lines[#lines] })
  if opts.after then
    opts.after()
  end
end

--- Insert mode left while the options were off (the keys that restore them did not run).
function M.cancel()
  restore()
  queued = nil
end

return M

-- Small helpers shared by the modules: the dllm client of a buffer, LSP <-> buffer positions.
local M = {}

M.METHOD_NOT_FOUND = -32601
M.REQUEST_CANCELLED = -32800
M.SERVER_CANCELLED = -32802

--- A buffer number, with nil and 0 meaning the current buffer.
function M.buf(bufnr)
  if bufnr == nil or bufnr == 0 then
    return vim.api.nvim_get_current_buf()
  end
  return bufnr
end

--- The window the user works on `bufnr` in: the current one when it shows the buffer (a buffer
--- split in two windows: bufwinid gives the first, and the request, the ghost text and the
--- insertion used that window's cursor), else the first that shows it (-1: none).
function M.win(bufnr)
  local current = vim.api.nvim_get_current_win()
  if vim.api.nvim_win_get_buf(current) == bufnr then
    return current
  end
  return vim.fn.bufwinid(bufnr)
end

function M.client(bufnr)
  local clients = vim.lsp.get_clients({ name = 'dllm', bufnr = bufnr })
  return clients[1]
end

--- Byte column of an LSP position on `row` (0-based) of `bufnr`, clamped to the line.
function M.byte_col(bufnr, row, character, encoding)
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
  if encoding == 'utf-8' then
    return math.min(character, #line)
  end
  local ok, col = pcall(vim.str_byteindex, line, encoding, character, false)
  if not ok or not col then
    return #line
  end
  return math.min(col, #line)
end

--- {row, col} (0-based, bytes) of an LSP position.
function M.to_buf(bufnr, pos, encoding)
  return pos.line, M.byte_col(bufnr, pos.line, pos.character, encoding)
end

--- Text the server wrote, with its line breaks as Neovim's lines take them. The server writes the
--- file's own (`\r\n` in a CRLF file, `\r` in a classic-Mac one), while a buffer's lines hold no
--- line end: split at `\n` alone, `\r\n` left a `^M` at the end of every inserted line (written to
--- disk as `\r\r\n`), and `\r` put the whole suggestion on one line.
function M.unix_text(text)
  return (text:gsub('\r\n?', '\n'))
end

--- An inline completion answer (a list or {items}) with every item's text passed through unix_text.
function M.unix_answer(result)
  if type(result) ~= 'table' then
    return result
  end
  local items = {}
  for i, item in ipairs(result.items or result) do
    local copy = vim.deepcopy(item)
    if type(copy.insertText) == 'string' then
      copy.insertText = M.unix_text(copy.insertText)
    elseif type(copy.insertText) == 'table' and type(copy.insertText.value) == 'string' then
      copy.insertText.value = M.unix_text(copy.insertText.value)
    end
    items[i] = copy
  end
  if result.items then
    return vim.tbl_extend('force', result, { items = items })
  end
  return items
end

function M.is_error(err, code)
  return type(err) == 'table' and err.code == code
end

function M.is_cancelled(err)
  return M.is_error(err, M.REQUEST_CANCELLED) or M.is_error(err, M.SERVER_CANCELLED)
end

return M

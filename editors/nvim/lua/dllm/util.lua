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

function M.is_error(err, code)
  return type(err) == 'table' and err.code == code
end

function M.is_cancelled(err)
  return M.is_error(err, M.REQUEST_CANCELLED) or M.is_error(err, M.SERVER_CANCELLED)
end

return M

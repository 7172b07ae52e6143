-- Ghost text drawn with extmarks (Neovim 0.11, or 0.12 with native = false): the first line of the
-- suggestion as inline virtual text at the cursor, the other lines as virtual lines below it.
local M = {}

M.ns = vim.api.nvim_create_namespace('dllm.ghost')
-- The namespace Neovim 0.12's vim.lsp.inline_completion draws in.
M.native_ns = vim.api.nvim_create_namespace('nvim.lsp.inline_completion')

function M.clear(bufnr)
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

--- Draws `text` (what is left to insert) at row/col (0-based, bytes). `hint` (e.g. " (2/3)" while
--- cycling through alternatives) goes after its last line as a ComplHintMore chunk, where Neovim
--- 0.12's own inline completion puts it.
function M.draw(bufnr, row, col, text, hl_group, hint)
  M.clear(bufnr)
  if text == '' then
    return
  end
  local lines = vim.split(text, '\n', { plain = true })
  local chunks = {}
  for i, line in ipairs(lines) do
    chunks[i] = { { line, hl_group } }
  end
  if hint then
    table.insert(chunks[#chunks], { hint, 'ComplHintMore' })
  end
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = chunks[i]
  end
  local first = vim.tbl_filter(function(chunk)
    return chunk[1] ~= ''
  end, chunks[1])
  vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, {
    virt_text = #first > 0 and first or nil,
    virt_text_pos = 'inline',
    virt_lines = #virt_lines > 0 and virt_lines or nil,
    hl_mode = 'combine',
    right_gravity = false,
  })
end

--- The text of a line's chunks without the index hint ("(1/2)", a ComplHintMore chunk).
local function chunks_text(chunks)
  local parts = {}
  for _, chunk in ipairs(chunks or {}) do
    if chunk[2] ~= 'ComplHintMore' then
      parts[#parts + 1] = chunk[1]
    end
  end
  return table.concat(parts)
end

--- The index hint drawn in `bufnr` ("(2/3)" once the user cycles through alternatives), or nil.
function M.hint(bufnr)
  for _, ns in ipairs({ M.ns, M.native_ns }) do
    for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, { details = true })) do
      local details = mark[4]
      local lines = { details.virt_text or {} }
      vim.list_extend(lines, details.virt_lines or {})
      for _, line in ipairs(lines) do
        for _, chunk in ipairs(line) do
          if chunk[2] == 'ComplHintMore' then
            return vim.trim(chunk[1])
          end
        end
      end
    end
  end
  return nil
end

--- The ghost text currently drawn in `bufnr` (by us or by Neovim's inline completion), or nil.
--- The index hint ("(1/2)") is a ComplHintMore chunk and is left out.
function M.read(bufnr)
  for _, ns in ipairs({ M.ns, M.native_ns }) do
    local marks = vim.api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, { details = true })
    for _, mark in ipairs(marks) do
      local details = mark[4]
      if details.virt_text or details.virt_lines then
        local lines = { chunks_text(details.virt_text) }
        for _, vl in ipairs(details.virt_lines or {}) do
          lines[#lines + 1] = chunks_text(vl)
        end
        return table.concat(lines, '\n'), { row = mark[2], col = mark[3], native = ns == M.native_ns }
      end
    end
  end
  return nil
end

return M

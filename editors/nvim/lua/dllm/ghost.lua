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

--- Draws `text` (what is left to insert) at row/col (0-based, bytes).
function M.draw(bufnr, row, col, text, hl_group)
  M.clear(bufnr)
  if text == '' then
    return
  end
  local lines = vim.split(text, '\n', { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { lines[i], hl_group } }
  end
  vim.api.nvim_buf_set_extmark(bufnr, M.ns, row, col, {
    virt_text = lines[1] ~= '' and { { lines[1], hl_group } } or nil,
    virt_text_pos = 'inline',
    virt_lines = #virt_lines > 0 and virt_lines or nil,
    hl_mode = 'combine',
    right_gravity = false,
  })
end

local function chunks_text(chunks)
  local parts = {}
  for _, chunk in ipairs(chunks or {}) do
    parts[#parts + 1] = chunk[1]
  end
  return table.concat(parts)
end

--- The ghost text currently drawn in `bufnr` (by us or by Neovim's inline completion), or nil.
--- The index hint Neovim appends ("(1/2)") is a ComplHintMore chunk and is left out.
function M.read(bufnr)
  for _, ns in ipairs({ M.ns, M.native_ns }) do
    local marks = vim.api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, { details = true })
    for _, mark in ipairs(marks) do
      local details = mark[4]
      if details.virt_text or details.virt_lines then
        local first = {}
        for _, chunk in ipairs(details.virt_text or {}) do
          if chunk[2] ~= 'ComplHintMore' then
            first[#first + 1] = chunk
          end
        end
        local lines = { chunks_text(first) }
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

-- Next-edit suggestions (dllm/nextEdits): after the user changed one site, the server proposes
-- edits at the related sites. They are previewed with extmarks (old text struck through, new text
-- after it); extmarks also track each site while other edits are applied, so "accept one" keeps the
-- remaining ranges right.
local util = require('dllm.util')

local M = {}

M.ns = vim.api.nvim_create_namespace('dllm.next_edits')
M.unsupported = false

---@type table<integer, {id: integer, newText: string, label: string}[]>
local pending = {}

function M.dismiss(bufnr)
  bufnr = util.buf(bufnr)
  pending[bufnr] = nil
  if vim.api.nvim_buf_is_valid(bufnr) then
    vim.api.nvim_buf_clear_namespace(bufnr, M.ns, 0, -1)
  end
end

local function draw(bufnr, edit, srow, scol, erow, ecol)
  local shown = edit.newText:gsub('\n', '⏎')
  return vim.api.nvim_buf_set_extmark(bufnr, M.ns, srow, scol, {
    end_row = erow,
    end_col = ecol,
    hl_group = 'DiffDelete',
    virt_text = { { ' → ' .. shown, 'DiffAdd' } },
    virt_text_pos = 'eol',
  })
end

--- Shows `edits` (LSP ranges) as a preview in `bufnr`.
function M.preview(bufnr, edits, encoding)
  M.dismiss(bufnr)
  local list = {}
  for _, edit in ipairs(edits) do
    edit = vim.tbl_extend('force', edit, { newText = util.unix_text(edit.newText or '') })
    local srow, scol = util.to_buf(bufnr, edit.range.start, encoding)
    local erow, ecol = util.to_buf(bufnr, edit.range['end'], encoding)
    list[#list + 1] = { id = draw(bufnr, edit, srow, scol, erow, ecol), newText = edit.newText, label = edit.label or '' }
  end
  pending[bufnr] = #list > 0 and list or nil
  return #list
end

--- Asks the server; on_done(count) when the preview is drawn (count 0: none or unsupported).
function M.request(bufnr, on_done)
  bufnr = util.buf(bufnr)
  on_done = on_done or function() end
  local client = util.client(bufnr)
  if not client then
    vim.notify('dllm: no dllm-lsp client in this buffer', vim.log.levels.WARN)
    return on_done(0)
  end
  if M.unsupported then
    vim.notify('dllm: this server does not offer next edits (dllm/nextEdits)', vim.log.levels.INFO)
    return on_done(0)
  end
  local params = vim.lsp.util.make_position_params(util.win(bufnr), client.offset_encoding)
  client:request('dllm/nextEdits', params, function(err, result)
    if util.is_error(err, util.METHOD_NOT_FOUND) then
      M.unsupported = true
      vim.notify('dllm: this server does not offer next edits (dllm/nextEdits)', vim.log.levels.INFO)
      return on_done(0)
    elseif err then
      vim.notify('dllm: next edits failed: ' .. tostring(err.message), vim.log.levels.WARN)
      return on_done(0)
    end
    local n = M.preview(bufnr, (result or {}).edits or {}, client.offset_encoding)
    if n == 0 then
      vim.notify('dllm: no next edits', vim.log.levels.INFO)
    end
    on_done(n)
  end, bufnr)
end

local function apply(bufnr, edit)
  local mark = vim.api.nvim_buf_get_extmark_by_id(bufnr, M.ns, edit.id, { details = true })
  if not mark or not mark[1] then
    return
  end
  local srow, scol, details = mark[1], mark[2], mark[3]
  vim.api.nvim_buf_set_text(bufnr, srow, scol, details.end_row, details.end_col, vim.split(edit.newText, '\n', { plain = true }))
  vim.api.nvim_buf_del_extmark(bufnr, M.ns, edit.id)
end

function M.accept_all(bufnr)
  bufnr = util.buf(bufnr)
  local list = pending[bufnr]
  if not list then
    return 0
  end
  -- Last first, so that no applied edit moves a site still to apply (extmarks would cope anyway).
  table.sort(list, function(a, b)
    local ma = vim.api.nvim_buf_get_extmark_by_id(bufnr, M.ns, a.id, {})
    local mb = vim.api.nvim_buf_get_extmark_by_id(bufnr, M.ns, b.id, {})
    return ma[1] > mb[1] or (ma[1] == mb[1] and ma[2] > mb[2])
  end)
  for _, edit in ipairs(list) do
    apply(bufnr, edit)
  end
  M.dismiss(bufnr)
  return #list
end

--- Applies the pending edit nearest to the cursor; the others stay previewed.
function M.accept_one(bufnr)
  bufnr = util.buf(bufnr)
  local list = pending[bufnr]
  if not list then
    return false
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(util.win(bufnr)))
  row = row - 1
  local best, best_d
  for i, edit in ipairs(list) do
    -- rows first, then columns: of two edits on the cursor's line, the one under it
    local mark = vim.api.nvim_buf_get_extmark_by_id(bufnr, M.ns, edit.id, { details = true })
    local d = { math.abs(mark[1] - row), 0 }
    if d[1] == 0 then
      local stop = mark[3].end_row == row and mark[3].end_col or math.huge
      d[2] = (col < mark[2] and mark[2] - col) or (col > stop and col - stop) or 0
    end
    if not best_d or d[1] < best_d[1] or (d[1] == best_d[1] and d[2] < best_d[2]) then
      best, best_d = i, d
    end
  end
  apply(bufnr, table.remove(list, best))
  if #list == 0 then
    M.dismiss(bufnr)
  end
  return true
end

function M.count(bufnr)
  return #(pending[util.buf(bufnr)] or {})
end

return M

-- Inline suggestions drawn by the plugin itself (Neovim 0.11, or 0.12 with native = false):
-- requests on typing (debounced), streamed refinements redrawn as they arrive, accept whole / line /
-- word, typing through a suggestion keeps it, the server's alternatives cycled through.
local config = require('dllm.config')
local ghost = require('dllm.ghost')
local insert = require('dllm.insert')
local message = require('dllm.message')
local partial = require('dllm.partial')
local span = require('dllm.span')
local stream = require('dllm.stream')
local util = require('dllm.util')

local M = {}

---@class dllm.BufState
---@field item? {text: string, range?: table, encoding: string} the suggestion drawn (whole insert text)
---@field items? table[] every suggestion of the last answer: the greedy one, then its alternatives
---@field index? integer which of `items` is `item`
---@field cycled? boolean the user has cycled: the index hint is drawn
---@field deferred? integer cycling asked for while the answer was still coming: applied to it
---@field cancel? fun() cancels the running request
---@field done? boolean the request has answered
---@field timer? uv.uv_timer_t
local states = {} ---@type table<integer, dllm.BufState>

M.enabled = true

local function state(bufnr)
  states[bufnr] = states[bufnr] or {}
  return states[bufnr]
end

local function cursor(bufnr)
  local win = util.win(bufnr)
  if win == -1 then
    return nil
  end
  local pos = vim.api.nvim_win_get_cursor(win)
  return pos[1] - 1, pos[2]
end

--- Where `item`'s range lies now (dllm.span): its byte positions, taken when it was shown (on the
--- text its request was made on), moved past what was typed at the cursor since.
local function placed(bufnr, item)
  if not item or item.text == '' then
    return nil
  end
  local range = item.bytes
  if not range and item.range then
    local srow, scol = util.to_buf(bufnr, item.range.start, item.encoding)
    local erow, ecol = util.to_buf(bufnr, item.range['end'], item.encoding)
    range = { srow, scol, erow, ecol }
  end
  return span.place(bufnr, util.win(bufnr), item.text, range, item.origin)
end

--- What of `item` is still to insert at the cursor: the text after what the user already typed
--- inside its range, minus the part of the line after the cursor that the range replaces anyway.
--- nil when the buffer no longer agrees with the suggestion.
function M.remainder(bufnr, item)
  local p = placed(bufnr, item)
  if not p then
    return nil
  end
  local rest = span.shown(p)
  if rest == '' then
    return nil
  end
  return rest, p.row, p.col
end

local function render(bufnr)
  local st = state(bufnr)
  local rest, row, col = M.remainder(bufnr, st.item)
  if not rest or vim.api.nvim_get_mode().mode:sub(1, 1) ~= 'i' then
    ghost.clear(bufnr)
    return false
  end
  -- As Neovim 0.12 does: the "(2/3)" hint once the user cycles, not before.
  local hint = st.cycled and st.items and #st.items > 1 and (' (%d/%d)'):format(st.index, #st.items) or nil
  ghost.draw(bufnr, row, col, rest, config.options.hl_group, hint)
  return true
end

--- Shows `items` (an answer, or one streamed state of its first item), the first one drawn.
--- Called while the buffer is as the request saw it (`origin`): the ranges are taken in bytes now.
local function show(bufnr, items, encoding, origin)
  local st = state(bufnr)
  for _, item in ipairs(items) do
    item.encoding, item.origin = encoding, origin
    if item.range then
      local srow, scol = util.to_buf(bufnr, item.range.start, encoding)
      local erow, ecol = util.to_buf(bufnr, item.range['end'], encoding)
      item.bytes = { srow, scol, erow, ecol }
    end
  end
  st.items, st.index, st.item, st.cycled = items, 1, items[1], false
  render(bufnr)
end

function M.dismiss(bufnr)
  bufnr = util.buf(bufnr)
  local st = state(bufnr)
  if st.cancel then
    st.cancel()
  end
  st.cancel, st.item, st.items, st.index, st.done, st.deferred = nil, nil, nil, nil, nil, nil
  ghost.clear(bufnr)
end

function M.request(bufnr)
  bufnr = util.buf(bufnr)
  local client = util.client(bufnr)
  if not client or not M.enabled then
    return
  end
  local st = state(bufnr)
  if st.cancel then
    st.cancel()
  end
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local row, col = cursor(bufnr)
  local origin = span.origin(bufnr, util.win(bufnr))
  local params = vim.lsp.util.make_position_params(util.win(bufnr), client.offset_encoding)
  params.context = { triggerKind = 2 }
  local function current()
    local r, c = cursor(bufnr)
    return vim.api.nvim_buf_is_valid(bufnr) and vim.api.nvim_buf_get_changedtick(bufnr) == tick and r == row and c == col
  end
  st.done, st.deferred = false, nil
  st.cancel = stream.request(client, bufnr, params, function(item)
    if current() then
      show(bufnr, { item }, client.offset_encoding, origin)
    end
  end, function(err, result)
    st.done = true
    st.cancel = nil
    if err then
      if not util.is_cancelled(err) then
        -- once: a file the server refuses (above its size limit) fails every request, with the
        -- text its showMessage said already
        message.notify(err.message or err, vim.log.levels.WARN, true)
      end
      return
    end
    if current() then
      show(bufnr, stream.items(result), client.offset_encoding, origin)
      local deferred = st.deferred or 0
      for _ = 1, math.abs(deferred) do
        M.cycle(deferred > 0 and 1 or -1, bufnr)
      end
    end
    st.deferred = nil
  end)
end

--- Draws the next (`delta` 1) or previous (-1) of the answer's suggestions that still fits what is
--- typed, wrapping around. Returns false when there is no other to show.
function M.cycle(delta, bufnr)
  bufnr = util.buf(bufnr)
  local st = state(bufnr)
  local items = st.items
  if not st.done and st.cancel and M.remainder(bufnr, st.item) then
    -- What is drawn is a streamed report, one item: the answer with the alternatives has not come.
    -- The press is kept and applied to it when it comes, not spent on a list of one.
    st.deferred = (st.deferred or 0) + delta
    stream.stats.deferred_cycles = stream.stats.deferred_cycles + 1
    return true
  end
  if not items or #items < 2 or not M.remainder(bufnr, st.item) then
    return false
  end
  local n = #items
  for step = 1, n - 1 do
    local index = (st.index - 1 + delta * step) % n + 1
    if M.remainder(bufnr, items[index]) then
      st.index, st.item, st.cycled = index, items[index], true
      return render(bufnr)
    end
  end
  return false
end

--- On each keystroke in insert mode: keep a suggestion the user is typing through, else ask again.
local function on_change(bufnr)
  local st = state(bufnr)
  if st.item and st.done and render(bufnr) then
    return
  end
  ghost.clear(bufnr)
  st.item, st.items = nil, nil
  if not config.options.auto_trigger then
    return
  end
  if st.timer then
    st.timer:stop()
  else
    st.timer = vim.uv.new_timer()
  end
  st.timer:start(
    config.options.debounce_ms,
    0,
    vim.schedule_wrap(function()
      if vim.api.nvim_buf_is_valid(bufnr) and vim.api.nvim_get_mode().mode:sub(1, 1) == 'i' then
        M.request(bufnr)
      end
    end)
  )
end

function M.attach(bufnr)
  local group = vim.api.nvim_create_augroup('dllm.suggest.' .. bufnr, { clear = true })
  vim.api.nvim_create_autocmd({ 'TextChangedI', 'CursorMovedI' }, {
    group = group,
    buffer = bufnr,
    callback = function()
      on_change(bufnr)
    end,
  })
  vim.api.nvim_create_autocmd({ 'InsertLeave', 'BufLeave' }, {
    group = group,
    buffer = bufnr,
    callback = function()
      M.dismiss(bufnr)
    end,
  })
end

function M.detach(bufnr)
  pcall(vim.api.nvim_del_augroup_by_name, 'dllm.suggest.' .. bufnr)
  M.dismiss(bufnr)
  local st = states[bufnr]
  if st and st.timer then
    st.timer:stop()
    st.timer:close()
  end
  states[bufnr] = nil
end

--- Accepts all of the suggestion ('all'), its current line ('line') or its next word ('word').
--- Returns false when there is nothing to accept. The text is typed in (dllm.insert): `.` repeats
--- it with the rest of the insert, `u` takes it back in one step.
function M.accept(kind, bufnr)
  bufnr = util.buf(bufnr)
  local st = state(bufnr)
  local rest = M.remainder(bufnr, st.item)
  if not rest then
    return false
  end
  local win = util.win(bufnr)
  if kind == 'all' or kind == nil then
    -- the server's range may cover text after the cursor (dllm.span)
    local text, delete = span.insertion(placed(bufnr, st.item))
    if st.cancel then
      st.cancel()
    end
    st.item, st.items, st.cancel = nil, nil, nil
    ghost.clear(bufnr)
    insert.at_cursor(bufnr, win, text, { delete = delete })
    return true
  end
  local chunk = kind == 'line' and partial.line(rest) or partial.word(rest)
  -- The suggestion stays: the text going in is now "typed through" it.
  st.done = true
  insert.at_cursor(bufnr, win, chunk, {
    after = function()
      render(bufnr)
    end,
  })
  return true
end

--- The suggestion currently shown in `bufnr` (what is left to insert), or nil.
function M.current(bufnr)
  bufnr = util.buf(bufnr)
  return (M.remainder(bufnr, state(bufnr).item))
end

return M

-- Neovim >= 0.12: vim.lsp.inline_completion requests, draws and accepts the suggestion. To show
-- streamed refinements through it, the dllm client's textDocument/inlineCompletion requests are sent
-- as dllm/inlineCompletion with a partialResultToken, and each `$/progress` report is handed to
-- Neovim's handler as if it were an answer (it redraws on every call); the final answer follows.
local config = require('dllm.config')
local ghost = require('dllm.ghost')
local insert = require('dllm.insert')
local partial = require('dllm.partial')
local span = require('dllm.span')
local stream = require('dllm.stream')
local util = require('dllm.util')

local M = {}

function M.available()
  return vim.lsp.inline_completion ~= nil and vim.fn.has('nvim-0.12') == 1
end

M.asked = {} ---@type table<integer, boolean> bufnr -> trigger() asked (the next request goes out with auto_trigger off)
local pending = {} ---@type table<integer, fun()> bufnr -> cancel of the running streamed request
-- bufnr -> next / prev pressed while that request's answer was still coming (Neovim then holds the
-- report's one item): applied once the answer with the alternatives is Neovim's.
local deferred = {} ---@type table<integer, integer>
-- bufnr -> { handler, ctx, row, col, origin }: the last answer handed to Neovim's handler, and the
-- cursor (row, byte column) its request was made at, where the items' ranges start; `origin` also
-- holds that line's text then (dllm.span finds a range end after the cursor again from it).
local answered = {}

--- Neovim (0.12-dev) redraws its current item on every CursorMovedI at the item's range start; a
--- Backspace that takes the line below that column made it raise "Invalid 'col': out of range"
--- (a hit-ENTER prompt while typing). Once the cursor is before where the answer's request was
--- made, the item is Neovim's no more: it gets an empty answer, before its own redraw runs.
local function drop_stale_item(bufnr)
  local last = answered[bufnr]
  local win = util.win(bufnr)
  if not last or win == -1 then
    return
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(win))
  if row ~= last.row or col < last.col then
    answered[bufnr] = nil
    last.handler(nil, { items = {} }, last.ctx)
  end
end

local function remember(bufnr, handler, ctx, cursor, origin)
  if cursor then
    answered[bufnr] = { handler = handler, ctx = ctx, row = cursor[1], col = cursor[2], origin = origin }
  end
end

--- Wraps client.request (on_init of the dllm client).
function M.wrap_client(client)
  local request = client.request
  client.request = function(self, method, params, handler, bufnr)
    if method ~= 'textDocument/inlineCompletion' or not handler then
      return request(self, method, params, handler, bufnr)
    end
    bufnr = vim._resolve_bufnr(bufnr)
    local uri = type(params) == 'table' and type(params.textDocument) == 'table' and params.textDocument.uri
    if uri and uri ~= vim.uri_from_bufnr(bufnr) then
      -- Neovim 0.12-dev's per-buffer completors listen to CursorMovedI in every buffer and ask
      -- without a bufnr (the current one is assumed above), at the current window's cursor: typing
      -- with a second file open sent a request for that file too, at a position of this one, and
      -- it took this buffer's place (cancelling its request: no ghost text, or an error answer).
      -- Such a request is answered empty, unsent.
      vim.schedule(function()
        handler(nil, { items = {} }, { method = method, client_id = self.id, params = params })
      end)
      return true, nil
    end
    if not config.options.auto_trigger and not M.asked[bufnr] then
      -- Neovim asks on every keystroke; with auto_trigger off only trigger() gets an answer
      vim.schedule(function()
        handler(nil, { items = {} }, { method = method, client_id = self.id, bufnr = bufnr, params = params })
      end)
      return true, nil
    end
    local asked = M.asked[bufnr]
    M.asked[bufnr] = nil
    if not stream.enabled or stream.supported == false then
      local w = util.win(bufnr)
      local at = w ~= -1 and vim.api.nvim_win_get_cursor(w) or nil
      local origin = span.origin(bufnr, w)
      return request(self, method, params, function(err, result, ctx, ...)
        remember(bufnr, handler, ctx, at, origin)
        handler(err, util.unix_answer(result), ctx, ...)
      end, bufnr)
    end
    if pending[bufnr] then
      pending[bufnr]()
    end
    deferred[bufnr] = nil
    local tick = vim.api.nvim_buf_get_changedtick(bufnr)
    local win = util.win(bufnr)
    local cursor = win ~= -1 and vim.api.nvim_win_get_cursor(win) or nil
    local origin = span.origin(bufnr, win)
    local ctx = { method = method, client_id = self.id, bufnr = bufnr, params = params }
    local function current()
      if not vim.api.nvim_buf_is_valid(bufnr) or vim.api.nvim_buf_get_changedtick(bufnr) ~= tick then
        return false
      end
      local w = util.win(bufnr)
      local now = w ~= -1 and vim.api.nvim_win_get_cursor(w) or nil
      return vim.deep_equal(now, cursor) and vim.api.nvim_get_mode().mode:sub(1, 1) == 'i'
    end
    -- The buffer changed while the cursor stayed where the request was made (a formatter, an
    -- edit from a timer or another client): Neovim asks again only when the cursor moves.
    local function changed_under_cursor()
      if not vim.api.nvim_buf_is_valid(bufnr) or vim.api.nvim_buf_get_changedtick(bufnr) == tick then
        return false
      end
      local w = util.win(bufnr)
      local now = w ~= -1 and vim.api.nvim_win_get_cursor(w) or nil
      return vim.deep_equal(now, cursor) and vim.api.nvim_get_mode().mode:sub(1, 1) == 'i'
        and vim.api.nvim_get_current_buf() == bufnr
    end
    local cancel
    -- The original request function: through self.request it would come back here.
    cancel = stream.request(self, bufnr, params, function(item)
      if current() and item.text ~= '' then
        remember(bufnr, handler, ctx, cursor, origin)
        handler(nil, { items = { { insertText = item.text, range = item.range } } }, ctx)
      end
    end, function(err, result)
      local cycles
      if pending[bufnr] == cancel then
        pending[bufnr] = nil
        cycles, deferred[bufnr] = deferred[bufnr], nil
      end
      if util.is_cancelled(err) then
        return
      end
      if err or current() then
        remember(bufnr, handler, ctx, cursor, origin)
        handler(err, util.unix_answer(result), ctx)
        if not err and cycles and cycles ~= 0 then
          vim.lsp.inline_completion.select({ bufnr = bufnr, count = cycles })
        end
      elseif changed_under_cursor() then
        -- The answer is for the text before the change, and so is the streamed report Neovim
        -- still draws: that stayed, and Tab took it (a few tokens of the suggestion). It is taken
        -- away and the suggestion asked for again, as a cursor move would (as trigger() does).
        answered[bufnr] = nil
        handler(nil, { items = {} }, ctx)
        M.asked[bufnr] = asked
        vim.api.nvim_exec_autocmds('CursorMovedI', { buffer = bufnr, modeline = false })
      end
    end, request)
    pending[bufnr] = cancel
    return true, nil
  end
end

function M.attach(client, bufnr)
  local group = vim.api.nvim_create_augroup('dllm.native.' .. bufnr, { clear = true })
  -- Before Neovim's own CursorMovedI handler (autocmds run in the order they were made): enabling
  -- again after ours makes Neovim's come second even where it was enabled before.
  vim.lsp.inline_completion.enable(false, { bufnr = bufnr })
  vim.api.nvim_create_autocmd('CursorMovedI', {
    group = group,
    buffer = bufnr,
    callback = function()
      drop_stale_item(bufnr)
    end,
  })
  vim.lsp.inline_completion.enable(true, { bufnr = bufnr })
  vim.api.nvim_create_autocmd('InsertLeave', {
    group = group,
    buffer = bufnr,
    callback = function()
      if pending[bufnr] then
        pending[bufnr]()
        pending[bufnr] = nil
      end
      deferred[bufnr] = nil
      answered[bufnr] = nil
    end,
  })
end

function M.detach(bufnr)
  pcall(vim.api.nvim_del_augroup_by_name, 'dllm.native.' .. bufnr)
  answered[bufnr] = nil
  if pending[bufnr] then
    pending[bufnr]()
    pending[bufnr] = nil
  end
  deferred[bufnr] = nil
end

--- Neovim's current suggestion placed at the cursor (dllm.span), nil when the buffer no longer
--- agrees with it. Its range (Neovim's, in bytes) is of the text the answer's request was made on.
local function native_placed(item, bufnr)
  local text = type(item.insert_text) == 'string' and item.insert_text or nil
  if not text then
    return nil
  end
  local range = item.range
      and { item.range.start.row, item.range.start.col, item.range.end_.row, item.range.end_.col }
    or nil
  local last = answered[bufnr]
  return span.place(bufnr, util.win(bufnr), text, range, last and last.origin)
end

--- Accepts all, a line or a word of Neovim's current suggestion, at the cursor. Not through
--- Neovim's own accept: that writes the item over its range, which ends where the cursor was when
--- the answer came, so a character typed since (the suggestion's first, typed through) was doubled.
--- A range that ends after the cursor replaces the text there when all is taken (it was left after
--- the accepted text: `x)` over `)` gave `x))`); a line or a word is taken from the text as drawn,
--- less the replaced part at its end.
function M.accept(kind, bufnr)
  bufnr = util.buf(bufnr)
  kind = kind or 'all'
  return vim.lsp.inline_completion.get({
    bufnr = bufnr,
    on_accept = function(item)
      local placed = native_placed(item, bufnr)
      if not placed then
        return
      end
      local chunk, delete
      if kind == 'all' then
        chunk, delete = span.insertion(placed)
      else
        local shown = span.shown(placed)
        chunk, delete = (kind == 'line' and partial.line(shown)) or partial.word(shown), 0
      end
      if chunk == '' and delete == 0 then
        return
      end
      -- typed in (dllm.insert): `.` repeats it with the rest of the insert, `u` takes it back at once
      insert.at_cursor(bufnr, util.win(bufnr), chunk, {
        delete = delete,
        after = function()
          -- the whole suggestion is taken: its command (the import it needs) runs after the text
          -- is in, as Neovim's accept runs it
          if kind == 'all' and item.command then
            local client = vim.lsp.get_client_by_id(item.client_id)
            if client then
              client:exec_cmd(item.command, { bufnr = bufnr })
            end
          end
        end,
      })
    end,
  })
end

--- Shows Neovim's next (`delta` 1) or previous (-1) suggestion of the answer (it draws the "(2/3)"
--- hint). Returns false when no suggestion is shown.
function M.cycle(delta, bufnr)
  bufnr = util.buf(bufnr)
  local _, where = ghost.read(bufnr)
  if not where or not where.native then
    return false
  end
  if pending[bufnr] then
    deferred[bufnr] = (deferred[bufnr] or 0) + delta
    stream.stats.deferred_cycles = stream.stats.deferred_cycles + 1
    return true
  end
  vim.lsp.inline_completion.select({ bufnr = bufnr, count = delta })
  return true
end

return M

-- One completion request: `dllm/inlineCompletion` with a partialResultToken (each denoising step
-- arrives as `$/progress` and is passed to on_partial), or plain `textDocument/inlineCompletion`
-- when streaming is off or the server answered MethodNotFound.
local util = require('dllm.util')

local M = {}

M.supported = nil -- nil: unknown until the first answer
M.after_completion = nil ---@type fun(client: vim.lsp.Client)?
M.enabled = true
-- deferred_cycles: next / prev pressed while an answer was still coming, applied when it came.
M.stats = { requests = 0, reports = 0, last_reports = 0, last_latency_ms = nil, last_error = nil, deferred_cycles = 0 }

local router = {} ---@type table<string|integer, fun(value: table)>
local counter = 0

--- `$/progress` handler of the dllm client: our tokens go to their request, others to Neovim's.
function M.progress_handler(err, params, ctx, config)
  local route = params and router[params.token]
  if route then
    route(params.value)
    return
  end
  return vim.lsp.handlers['$/progress'](err, params, ctx, config)
end

--- Every item of an inline completion answer as {text, range}, in the server's order (the first is
--- the greedy suggestion, the others are its alternatives).
local function items_of(result)
  if type(result) ~= 'table' then
    return {}
  end
  local items = {}
  for _, item in ipairs(result.items or result) do
    local text = type(item.insertText) == 'string' and item.insertText or (item.insertText or {}).value
    items[#items + 1] = { text = util.unix_text(text or ''), range = item.range }
  end
  return items
end
M.items = items_of

local function first_item(result)
  return items_of(result)[1]
end
M.first_item = first_item

--- Sends the request. on_partial(item) for each streamed state, on_done(err, result, item) once.
--- Returns a function that cancels it. `send` replaces client.request (the 0.12 glue wraps that).
function M.request(client, bufnr, params, on_partial, on_done, send)
  send = send or client.request
  M.stats.requests = M.stats.requests + 1
  local started = vim.uv.hrtime()
  local reports = 0
  local cancelled = false
  local request_id
  local token

  local function finish(err, result)
    if token then
      router[token] = nil
    end
    if cancelled then
      return
    end
    if not err then
      M.stats.last_latency_ms = (vim.uv.hrtime() - started) / 1e6
      M.stats.last_reports = reports
    end
    M.stats.last_error = err and err.message or nil
    on_done(err, result, first_item(result))
    if not err and M.after_completion then
      M.after_completion(client)
    end
  end

  local function plain()
    local ok, id = send(client, 'textDocument/inlineCompletion', params, finish, bufnr)
    request_id = ok and id or nil
  end

  if M.enabled and M.supported ~= false then
    counter = counter + 1
    token = ('dllm-nvim-%d-%d'):format(vim.fn.getpid(), counter)
    router[token] = function(value)
      if cancelled or type(value) ~= 'table' or value.kind ~= 'report' then
        return
      end
      reports = reports + 1
      M.stats.reports = M.stats.reports + 1
      on_partial({ text = util.unix_text(value.text or ''), range = value.range, step = value.step,
        total = value.totalSteps })
    end
    local streamed = vim.tbl_extend('force', params, { partialResultToken = token })
    local ok, id = send(client, 'dllm/inlineCompletion', streamed, function(err, result)
      if util.is_error(err, util.METHOD_NOT_FOUND) then
        router[token] = nil
        M.supported = false
        if not cancelled then
          plain()
        end
        return
      end
      if not err then
        M.supported = true
      end
      finish(err, result)
    end, bufnr)
    request_id = ok and id or nil
  else
    plain()
  end

  return function()
    if cancelled then
      return
    end
    cancelled = true
    if token then
      router[token] = nil
    end
    if request_id then
      client:cancel_request(request_id)
    end
  end
end

return M

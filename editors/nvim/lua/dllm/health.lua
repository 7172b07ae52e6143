-- :checkhealth dllm — the Neovim version and mode, the server command, and what the running server
-- reports through dllm/status (model, device, whether it loaded).
local M = {}

function M.check()
  local health = vim.health
  local config = require('dllm.config')
  local native = require('dllm.native')
  local stream = require('dllm.stream')
  local opts = config.options

  health.start('dllm: Neovim')
  if vim.fn.has('nvim-0.11') == 1 then
    health.ok(('Neovim %s'):format(tostring(vim.version())))
  else
    health.error('Neovim >= 0.11 is needed (vim.lsp.config / vim.lsp.enable)')
  end
  if native.available() and opts.native then
    health.ok('ghost text: vim.lsp.inline_completion (native)')
  else
    health.ok('ghost text: drawn by dllm with extmarks')
  end

  health.start('dllm: server')
  if not require('dllm')._setup_done then
    health.warn("require('dllm').setup() has not been called")
  end
  if opts.tcp then
    health.info('connects to ' .. opts.tcp)
  else
    local cmd = config.server_cmd(opts)
    local exe = type(cmd) == 'table' and cmd[1] or nil
    if exe and vim.fn.executable(exe) == 1 then
      health.ok(('server command: %s'):format(table.concat(cmd, ' ')))
    else
      health.error(('server command not found: %s'):format(tostring(exe)), {
        'install it from its checkout (pip install /path/to/dllm-lsp: it is not on PyPI), or set cmd / python in setup()',
      })
    end
  end

  local clients = vim.lsp.get_clients({ name = 'dllm' })
  if #clients == 0 then
    health.warn('no dllm client is running', {
      'open a file of a configured filetype, or :DllmRestart when the server has exited',
    })
    return
  end
  local client = clients[1]
  health.ok(('client %d running (%s)'):format(client.id, client.offset_encoding))
  local resp = client:request_sync('dllm/status', vim.NIL, 5000)
  if not resp then
    health.error('dllm/status: no answer within 5 s')
    return
  end
  if resp.err then
    health.warn('dllm/status failed: ' .. tostring(resp.err.message))
    return
  end
  local s = resp.result or {}
  -- JSON null comes as vim.NIL, which is true and no string: `family` is null while the model
  -- loads and when its load failed, and concatenating it raised (no report, the error unsaid).
  local family = type(s.family) == 'string' and (' (' .. s.family .. ')') or ''
  health.info(('model: %s%s'):format(tostring(s.model), family))
  health.info('device: ' .. tostring(s.device))
  if s.error and s.error ~= vim.NIL then
    health.error('model error: ' .. tostring(s.error))
  elseif s.loaded then
    health.ok('model loaded')
  else
    health.warn('model not loaded yet')
  end
  if type(s.lastLatencyMs) == 'number' then
    health.info(('last completion: %.0f ms'):format(s.lastLatencyMs))
  end
  local said = require('dllm.message').history
  if #said > 0 then
    -- said on one line, cut to the message area, when they came (dllm.message): here whole
    health.info('the server said (window/showMessage, last first):')
    for i = #said, math.max(1, #said - 4), -1 do
      local text = said[i].text
      if said[i].level >= vim.log.levels.WARN then
        health.warn(text)
      else
        health.info(text)
      end
    end
  end
  local streaming = stream.supported == nil and 'unknown (no completion yet)' or tostring(stream.supported)
  health.info('streamed refinements (dllm/inlineCompletion): ' .. streaming)
end

return M

-- Options of require('dllm').setup(): defaults, merging, validation.
local M = {}

M.defaults = {
  -- Command that starts the server on stdio; nil means { python, '-m', 'dllm_lsp', 'serve', '--stdio' }
  -- when `python` is set, else { 'dllm-lsp', 'serve', '--stdio' }.
  cmd = nil,
  python = nil,
  -- Connect to a running `dllm-lsp serve --tcp HOST:PORT` instead of starting one: 'HOST:PORT'.
  tcp = nil,
  -- Token of a TCP server started with --token-file / DLLM_LSP_TOKEN (docs/deploy.md): a string, or
  -- a function returning one (e.g. read from a file). Sent only as initializationOptions.token.
  token = nil,
  filetypes = nil, -- nil: every filetype
  root_markers = { '.git', 'pyproject.toml', 'package.json', 'Cargo.toml', 'go.mod' },
  -- Server options (docs/protocol.md); sent as initializationOptions and under settings.dllm.
  server = { model = 'default', device = 'auto' },
  -- On Neovim >= 0.12 use vim.lsp.inline_completion to draw and accept; false: our extmarks.
  native = true,
  streaming = true, -- show the ghost text sharpening (dllm/inlineCompletion) when the server offers it
  auto_trigger = true,
  debounce_ms = 75,
  keymaps = {
    accept = '<Tab>',
    accept_line = '<M-l>',
    accept_word = '<M-w>',
    -- The server's other suggestions for the same place (server option `alternatives` > 1).
    next = '<M-]>',
    prev = '<M-[>',
    dismiss = '<C-]>',
    trigger = '<M-\\>',
  },
  hl_group = 'ComplHint', -- ghost text highlight (linked to Comment when the colorscheme lacks it)
}

M.options = vim.deepcopy(M.defaults)

local function check(name, value, kinds)
  local ok = false
  for _, kind in ipairs(kinds) do
    if type(value) == kind then
      ok = true
    end
  end
  if not ok then
    error(('dllm.setup: option %s must be %s, got %s'):format(name, table.concat(kinds, ' or '), type(value)), 3)
  end
end

function M.merge(user)
  user = user or {}
  check('opts', user, { 'table' })
  local opts = vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), user)
  check('cmd', opts.cmd, { 'nil', 'table' })
  check('python', opts.python, { 'nil', 'string' })
  check('tcp', opts.tcp, { 'nil', 'string' })
  check('token', opts.token, { 'nil', 'string', 'function' })
  check('filetypes', opts.filetypes, { 'nil', 'table' })
  check('server', opts.server, { 'table' })
  check('debounce_ms', opts.debounce_ms, { 'number' })
  check('keymaps', opts.keymaps, { 'table', 'boolean' })
  if opts.tcp and not opts.tcp:match('^.+:%d+$') then
    error(("dllm.setup: tcp must look like '127.0.0.1:2087', got '%s'"):format(opts.tcp), 2)
  end
  M.options = opts
  return opts
end

--- initializationOptions: the server options, plus the TCP token when one is configured.
function M.init_options(opts)
  local token = opts.token
  if type(token) == 'function' then
    token = token()
  end
  if type(token) == 'string' and token ~= '' then
    return vim.tbl_extend('force', opts.server, { token = vim.trim(token) })
  end
  return opts.server
end

--- The command (or RPC connector) that reaches the server.
function M.server_cmd(opts)
  if opts.tcp then
    local host, port = opts.tcp:match('^(.+):(%d+)$')
    return vim.lsp.rpc.connect(host, tonumber(port))
  end
  if opts.cmd then
    return opts.cmd
  end
  if opts.python then
    return { opts.python, '-m', 'dllm_lsp', 'serve', '--stdio' }
  end
  return { 'dllm-lsp', 'serve', '--stdio' }
end

return M

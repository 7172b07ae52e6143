-- Neovim config of the editor tests: the plugin from this checkout, the real server (python -m
-- dllm_lsp), the model and options from the environment the test sets.
local env = vim.env
vim.opt.runtimepath:prepend(env.DLLM_NVIM_PLUGIN)
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
vim.opt.termguicolors = true
vim.opt.number = true
vim.opt.laststatus = 2
vim.opt.showmode = true
vim.opt.statusline = "%f %m%=%{v:lua.require'dllm'.statusline()}  %l,%c "
vim.cmd.colorscheme('default')
vim.api.nvim_set_hl(0, 'ComplHint', { fg = '#8a8f98', italic = true })

require('dllm').setup({
  -- DLLM_TEST_TCP: connect to a server the test started with `serve --tcp` instead.
  cmd = (env.DLLM_TEST_TCP or '') == '' and { env.DLLM_TEST_PYTHON, '-m', 'dllm_lsp', 'serve', '--stdio' } or nil,
  tcp = (env.DLLM_TEST_TCP or '') ~= '' and env.DLLM_TEST_TCP or nil,
  token = (env.DLLM_TEST_TOKEN or '') ~= '' and env.DLLM_TEST_TOKEN or nil,
  -- DLLM_TEST_SERVER_OPTIONS: more server options, a JSON object (e.g. {"alternatives": 3}).
  server = vim.tbl_extend('force', { model = env.DLLM_TEST_MODEL, device = 'cpu' },
    (env.DLLM_TEST_SERVER_OPTIONS or '') ~= '' and vim.json.decode(env.DLLM_TEST_SERVER_OPTIONS) or {}),
  native = env.DLLM_NVIM_NATIVE ~= '0',
  debounce_ms = 50,
})
-- The test reads the plugin's state through this global over --remote-expr.
_G.dllm_test_state = function()
  local dllm = require('dllm')
  local bufnr = vim.api.nvim_get_current_buf()
  local clients = vim.lsp.get_clients({ name = 'dllm', bufnr = bufnr })
  local status
  if clients[1] then
    local resp = clients[1]:request_sync('dllm/status', vim.NIL, 2000)
    status = resp and resp.result
  end
  return vim.json.encode({
    attached = #clients > 0,
    ghost = dllm.ghost_text(bufnr) or vim.NIL,
    hint = require('dllm.ghost').hint(bufnr) or vim.NIL,
    mode = vim.api.nvim_get_mode().mode,
    lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false),
    cursor = vim.api.nvim_win_get_cursor(0),
    stats = dllm.stats(),
    status = status or vim.NIL,
    version = tostring(vim.version()),
  })
end

-- dllm-lsp for Neovim >= 0.11: require('dllm').setup({...}).
--
-- The client is configured with vim.lsp.config / vim.lsp.enable. Ghost text: on 0.12 Neovim's
-- vim.lsp.inline_completion draws it (fed streamed refinements, see dllm.native); on 0.11 the
-- plugin draws it with extmarks (dllm.suggest). Fill holes and next edits work on both.
local config = require('dllm.config')
local ghost = require('dllm.ghost')
local insert = require('dllm.insert')
local message = require('dllm.message')
local native = require('dllm.native')
local next_edits = require('dllm.next_edits')
local stream = require('dllm.stream')
local suggest = require('dllm.suggest')
local util = require('dllm.util')

local M = {}

M._setup_done = false

local function use_native()
  return config.options.native and native.available()
end

local server_status = {} -- the last dllm/status answer, for the statusline

--- Asks the server for dllm/status (model, device, last latency) and redraws statuslines.
--- While the model is still loading, asks again every second (up to `tries` times).
local function refresh_status(client, tries)
  tries = tries or 120
  client:request('dllm/status', vim.NIL, function(err, result)
    if err or type(result) ~= 'table' then
      return
    end
    server_status = result
    vim.cmd.redrawstatus({ bang = true })
    if result.loading or (not result.loaded and (result.error == nil or result.error == vim.NIL)) then
      if tries > 1 and not client:is_stopped() then
        vim.defer_fn(function()
          refresh_status(client, tries - 1)
        end, 1000)
      end
    end
  end)
end

local function attach(client, bufnr)
  refresh_status(client)
  if use_native() then
    native.attach(client, bufnr)
  else
    suggest.attach(bufnr)
  end
end

--- What a key with nothing to accept is fed as: what it does without the plugin. An Alt chord
--- Neovim has no mapping for is <Esc> and the key (`:help i_META`); fed as itself it inserted its
--- letter.
function M._unmapped_keys(lhs)
  local key = lhs:match('^<[MmAa]%-(%a)>$')
  return vim.keycode(key and ('<Esc>' .. key) or lhs)
end

local function map_keys(keymaps)
  if not keymaps then
    return
  end
  local function imap(lhs, fn, desc)
    if not lhs then
      return
    end
    local unmapped = M._unmapped_keys(lhs)
    vim.keymap.set('i', lhs, function()
      if not fn() then
        vim.api.nvim_feedkeys(unmapped, 'n', false)
      end
    end, { desc = desc, silent = true })
  end
  imap(keymaps.accept, function() return M.accept() end, 'dllm: accept the suggestion')
  imap(keymaps.accept_line, function() return M.accept_line() end, 'dllm: accept one line')
  imap(keymaps.accept_word, function() return M.accept_word() end, 'dllm: accept one word')
  imap(keymaps.next, function() return M.next() end, 'dllm: show the next suggestion')
  imap(keymaps.prev, function() return M.prev() end, 'dllm: show the previous suggestion')
  imap(keymaps.dismiss, function() return M.dismiss() end, 'dllm: dismiss the suggestion')
  imap(keymaps.trigger, function()
    M.trigger()
    return true
  end, 'dllm: ask for a suggestion')
end

function M.setup(user_opts)
  if vim.fn.has('nvim-0.11') ~= 1 then
    vim.notify('dllm: Neovim >= 0.11 is needed', vim.log.levels.ERROR)
    return
  end
  local opts = config.merge(user_opts)
  stream.enabled = opts.streaming
  stream.after_completion = refresh_status
  if vim.fn.hlexists('ComplHint') == 0 or vim.tbl_isempty(vim.api.nvim_get_hl(0, { name = 'ComplHint' })) then
    vim.api.nvim_set_hl(0, 'ComplHint', { link = 'Comment', default = true })
  end
  if vim.fn.hlexists('ComplHintMore') == 0 then
    -- The "(2/3)" hint while cycling; Neovim 0.12 defines it, 0.11 does not.
    vim.api.nvim_set_hl(0, 'ComplHintMore', { link = 'MoreMsg', default = true })
  end

  local cmd = config.server_cmd(opts)
  if type(cmd) == 'table' and cmd[1] and vim.fn.executable(cmd[1]) == 0 then
    -- Neovim only logs a command it cannot start (lsp.log): no suggestion would ever come, unsaid
    vim.notify(('dllm: %s is not an executable: the server cannot start (set `cmd` or `python` in setup())')
      :format(cmd[1]), vim.log.levels.WARN)
  end
  vim.lsp.config('dllm', {
    cmd = cmd,
    filetypes = opts.filetypes,
    root_markers = opts.root_markers,
    init_options = config.init_options(opts),
    settings = { dllm = opts.server },
    handlers = {
      ['$/progress'] = stream.progress_handler,
      -- one line that never waits for ENTER (Neovim's own prompted on a long one: dllm.message)
      ['window/showMessage'] = message.show_message_handler,
    },
    on_init = function(client)
      if use_native() then
        native.wrap_client(client)
      end
      local exp = client.server_capabilities and client.server_capabilities.experimental
      if type(exp) == 'table' and type(exp.dllm) == 'table' and exp.dllm.inlineCompletionStreaming ~= nil then
        stream.supported = exp.dllm.inlineCompletionStreaming
      end
    end,
    on_attach = attach,
  })
  vim.lsp.enable('dllm')

  local group = vim.api.nvim_create_augroup('dllm', { clear = true })
  vim.api.nvim_create_autocmd('LspDetach', {
    group = group,
    callback = function(ev)
      local client = vim.lsp.get_client_by_id(ev.data.client_id)
      if client and client.name == 'dllm' then
        suggest.detach(ev.buf)
        native.detach(ev.buf)
        next_edits.dismiss(ev.buf)
      end
    end,
  })
  -- The options an accepted text is typed in with are restored by keys after it; were those
  -- flushed (an error on the way), leaving insert mode restores them.
  vim.api.nvim_create_autocmd('InsertLeave', { group = group, callback = insert.cancel })
  if not opts.filetypes then
    -- vim.lsp.enable starts clients on FileType, which a buffer without a filetype (an unknown
    -- extension, a file without one, a new unnamed buffer) never gets: with `filetypes = nil`
    -- ("every buffer") those got no suggestions. They are started here when entered.
    vim.api.nvim_create_autocmd({ 'BufEnter', 'BufNewFile' }, {
      group = group,
      callback = function(ev)
        vim.schedule(function()
          M._start_without_filetype(ev.buf)
        end)
      end,
    })
    for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
      M._start_without_filetype(bufnr)
    end
  end
  map_keys(opts.keymaps)
  M._setup_done = true
end

--- Starts (or reuses) the dllm client for a loaded file buffer that has no filetype, as
--- vim.lsp.enable does for one that has: same config, root from `root_markers`.
function M._start_without_filetype(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) or not vim.api.nvim_buf_is_loaded(bufnr) then
    return
  end
  -- Unlisted ones are other plugins' scratch buffers, not files the user edits.
  if vim.bo[bufnr].buftype ~= '' or vim.bo[bufnr].filetype ~= '' or not vim.bo[bufnr].buflisted then
    return
  end
  if util.client(bufnr) then
    return
  end
  if config.options.filetypes or not vim.lsp.is_enabled('dllm') then
    return
  end
  local cfg = vim.deepcopy(vim.lsp.config.dllm)
  if cfg.root_dir == nil and cfg.root_markers then
    cfg.root_dir = vim.fs.root(bufnr, cfg.root_markers)
  end
  vim.lsp.start(cfg, { bufnr = bufnr })
end

--- Stops the dllm clients and starts them again for the open buffers they apply to, with the
--- options of the last setup() (the server died or was killed, or settings changed): Neovim does
--- not restart a server that exits, and re-opening a buffer with unsaved changes (`:e`) is refused.
function M.restart()
  vim.lsp.enable('dllm', false)
  vim.lsp.enable('dllm')
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    M._start_without_filetype(bufnr)
  end
end

--- Accepts the whole suggestion. Returns false when none is shown.
function M.accept()
  if use_native() then
    return native.accept('all')
  end
  return suggest.accept('all')
end

function M.accept_line()
  if use_native() then
    return native.accept('line')
  end
  return suggest.accept('line')
end

function M.accept_word()
  if use_native() then
    return native.accept('word')
  end
  return suggest.accept('word')
end

--- Shows the server's next suggestion for the same place (its alternatives, with the server option
--- `alternatives` > 1), wrapping around. Returns false when there is no other.
function M.next()
  if use_native() then
    return native.cycle(1)
  end
  return suggest.cycle(1)
end

--- Shows the previous suggestion. Returns false when there is no other.
function M.prev()
  if use_native() then
    return native.cycle(-1)
  end
  return suggest.cycle(-1)
end

function M.dismiss()
  local bufnr = vim.api.nvim_get_current_buf()
  local shown = ghost.read(bufnr) ~= nil
  suggest.dismiss(bufnr)
  if use_native() and shown then
    -- Neovim's own suggestion goes away when insert mode is left; this hides it in place.
    vim.api.nvim_buf_clear_namespace(bufnr, ghost.native_ns, 0, -1)
  end
  return shown
end

--- Asks for a suggestion at the cursor now (no debounce).
function M.trigger()
  if use_native() then
    -- Neovim requests on CursorMovedI; an explicit request goes through its completor.
    native.asked[vim.api.nvim_get_current_buf()] = true
    vim.api.nvim_exec_autocmds('CursorMovedI', { buffer = 0, modeline = false })
  else
    suggest.request(vim.api.nvim_get_current_buf())
  end
end

--- Turns automatic suggestions on or off.
function M.toggle(on)
  if on == nil then
    on = not suggest.enabled
  end
  suggest.enabled = on
  if use_native() then
    for _, client in ipairs(vim.lsp.get_clients({ name = 'dllm' })) do
      for bufnr in pairs(client.attached_buffers) do
        vim.lsp.inline_completion.enable(on, { bufnr = bufnr })
      end
    end
  end
  if not on then
    suggest.dismiss(vim.api.nvim_get_current_buf())
  end
  return on
end

--- Fills the holes in `range` (LSP range; default: the cursor, i.e. its enclosing scope) through the
--- server's dllm.fillHoles command; the server sends the edit with workspace/applyEdit.
function M.fill_holes(range, bufnr)
  bufnr = util.buf(bufnr)
  local client = util.client(bufnr)
  if not client then
    vim.notify('dllm: no dllm-lsp client in this buffer', vim.log.levels.WARN)
    return false
  end
  local provider = client.server_capabilities.executeCommandProvider or {}
  if not vim.tbl_contains(provider.commands or {}, 'dllm.fillHoles') then
    vim.notify('dllm: this server does not offer hole filling (dllm.fillHoles)', vim.log.levels.INFO)
    return false
  end
  if not range then
    local pos = vim.lsp.util.make_position_params(0, client.offset_encoding).position
    range = { start = pos, ['end'] = pos }
  end
  client:request('workspace/executeCommand', {
    command = 'dllm.fillHoles',
    arguments = { vim.uri_from_bufnr(bufnr), range },
  }, function(err, result)
    if err then
      vim.notify('dllm: fill holes failed: ' .. tostring(err.message), vim.log.levels.WARN)
      return
    end
    M.report_fill(result)
  end, bufnr)
  return true
end

--- Says what came of dllm.fillHoles: how many holes were filled, or the server's reasons for none.
function M.report_fill(result)
  if type(result) ~= 'table' then
    return
  end
  local sites = result.sites or {}
  if result.applied then
    local filled = 0
    for _, site in ipairs(sites) do
      if not site.reason then
        filled = filled + 1
      end
    end
    vim.notify(('dllm: filled %d hole%s'):format(filled, filled == 1 and '' or 's'))
    return
  end
  local reasons = {}
  if type(result.reason) == 'string' then
    reasons[#reasons + 1] = result.reason
  end
  for _, site in ipairs(sites) do
    if site.reason then
      reasons[#reasons + 1] = ('%s: %s'):format(site.label or 'hole', site.reason)
    end
  end
  vim.notify('dllm: no hole filled' .. (#reasons > 0 and (' (' .. table.concat(reasons, '; ') .. ')') or ''))
end

M.next_edits = next_edits.request
M.next_edits_accept_all = next_edits.accept_all
M.next_edits_accept_one = next_edits.accept_one
M.next_edits_dismiss = next_edits.dismiss

--- The ghost text shown in the current buffer (what is left to insert), or nil.
function M.ghost_text(bufnr)
  return (ghost.read(util.buf(bufnr)))
end

--- "dllm · MODEL · DEVICE · N ms" for a statusline: %{v:lua.require'dllm'.statusline()}
function M.statusline()
  if #vim.lsp.get_clients({ name = 'dllm', bufnr = 0 }) == 0 then
    return ''
  end
  local parts = { 'dllm' }
  local function add(v)
    if type(v) == 'string' and v ~= '' then
      parts[#parts + 1] = v
    end
  end
  add(server_status.model)
  add(server_status.device)
  local ms = stream.stats.last_latency_ms
  if ms then
    parts[#parts + 1] = ('%d ms'):format(ms)
  end
  if not suggest.enabled then
    parts[#parts + 1] = '(off)'
  end
  return table.concat(parts, ' · ')
end

--- Counters for statuslines and tests: requests, streamed reports, last latency.
function M.stats()
  return vim.tbl_extend('force', {}, stream.stats, {
    streaming = stream.supported,
    native = use_native(),
    enabled = suggest.enabled,
  })
end

return M

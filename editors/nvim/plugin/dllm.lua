-- User commands of dllm-lsp (they need require('dllm').setup() to have started the client).
if vim.g.loaded_dllm then
  return
end
vim.g.loaded_dllm = true

local function cmd(name, fn, opts)
  vim.api.nvim_create_user_command(name, fn, opts or {})
end

cmd('DllmFillHoles', function(args)
  local range
  if args.range > 0 then
    local client = require('dllm.util').client(0)
    local enc = client and client.offset_encoding or 'utf-16'
    range = vim.lsp.util.make_given_range_params({ args.line1, 0 }, { args.line2, #vim.fn.getline(args.line2) }, 0, enc).range
  end
  require('dllm').fill_holes(range)
end, { range = true, desc = 'dllm: fill the holes in the range (or the scope around the cursor)' })
cmd('DllmNextEdits', function()
  require('dllm').next_edits()
end, { desc = 'dllm: preview the next edits' })
cmd('DllmNextEditsAcceptAll', function()
  require('dllm').next_edits_accept_all()
end, {})
cmd('DllmNextEditsAcceptOne', function()
  require('dllm').next_edits_accept_one()
end, {})
cmd('DllmNextEditsDismiss', function()
  require('dllm').next_edits_dismiss()
end, {})
cmd('DllmToggle', function()
  local on = require('dllm').toggle()
  vim.notify('dllm: suggestions ' .. (on and 'on' or 'off'))
end, {})
cmd('DllmRestart', function()
  require('dllm').restart()
end, { desc = 'dllm: start the server again (after it exited, or to apply changed settings)' })
cmd('DllmStatus', function()
  vim.cmd('checkhealth dllm')
end, {})

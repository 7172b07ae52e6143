-- Messages to the user (the server's window/showMessage, the plugin's own reports) said on one line
-- that never waits for ENTER.
--
-- Neovim's own showMessage handler writes "LSP[dllm][Warning] dllm-lsp: ..." (0.11: with a line
-- break after it) through an echo: a message wider than the message area stops everything at
-- "Press ENTER or type command to continue", and the keys typed meanwhile go to that prompt. The
-- server's refusal of a file above its size limit did that as the file opened. Here the text is one
-- line, and when vim.notify is Neovim's own (it echoes) it is cut to the room the message area has;
-- a vim.notify replaced by a plugin (nvim-notify, noice, fidget...) gets it whole. The whole
-- text of the server's last messages is in `:checkhealth dllm`.
local M = {}

local LIMIT = 20
M.history = {} ---@type {level: integer, text: string}[] the server's last messages, whole, oldest first
local shown = {} ---@type table<string, true> texts said already (for `once`)

local LEVELS = {
  [1] = vim.log.levels.ERROR,
  [2] = vim.log.levels.WARN,
  [3] = vim.log.levels.INFO,
  [4] = vim.log.levels.DEBUG,
}

--- Whether vim.notify is Neovim's own, which echoes (and so may prompt).
local function echoing()
  local info = debug.getinfo(vim.notify, 'S')
  return info ~= nil and info.source:find('vim/_editor.lua', 1, true) ~= nil
end

--- `text` cut to `width` display cells, with "…" where it was cut.
function M.fit(text, width)
  if vim.fn.strdisplaywidth(text) <= width then
    return text
  end
  local kept = {}
  local used = 1 -- the "…"
  for _, char in ipairs(vim.fn.split(text, '\\zs')) do
    local w = vim.fn.strdisplaywidth(char)
    if used + w > width then
      break
    end
    used = used + w
    kept[#kept + 1] = char
  end
  return table.concat(kept) .. '…'
end

--- The text as it is said: "dllm: " and one line (the server's own "dllm-lsp: " prefix dropped).
function M.line(text)
  text = tostring(text):gsub('^dllm%-lsp: ', ''):gsub('%s*[\r\n]+%s*', ' ')
  return 'dllm: ' .. vim.trim(text)
end

--- Says `text` at `level` on one line, never prompting. `once`: not when the same text was said.
function M.notify(text, level, once)
  local msg = M.line(text)
  if once and shown[msg] then
    return
  end
  shown[msg] = true
  if echoing() then
    -- v:echospace: the cells left of 'showcmd' and 'ruler' on the last line, where an echo fits
    -- without the hit-ENTER prompt.
    msg = M.fit(msg, math.max(vim.v.echospace, 10))
    -- A second echo before the screen is redrawn goes on a line of its own, and two lines prompt
    -- as one long one did (the server says a failed model load twice, at start and at the first
    -- request): the redraw lets this one take the last one's place.
    vim.cmd.redraw()
  end
  vim.notify(msg, level or vim.log.levels.INFO)
end

--- window/showMessage of the dllm client.
function M.show_message_handler(_, params, _)
  if type(params) ~= 'table' or type(params.message) ~= 'string' then
    return
  end
  local level = LEVELS[params.type] or vim.log.levels.INFO
  table.insert(M.history, { level = level, text = params.message })
  if #M.history > LIMIT then
    table.remove(M.history, 1)
  end
  M.notify(params.message, level)
end

return M

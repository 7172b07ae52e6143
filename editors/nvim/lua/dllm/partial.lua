-- How much of a suggestion "accept a line" and "accept a word" take.
local M = {}

--- The rest of the current line; when the suggestion starts with a line break, that break and the
--- next line (so repeated presses walk down a multi-line suggestion).
function M.line(text)
  local nl = text:find('\n', 1, true)
  if not nl then
    return text
  end
  if nl == 1 then
    local second = text:find('\n', 2, true)
    return second and text:sub(1, second - 1) or text
  end
  return text:sub(1, nl - 1)
end

--- Leading whitespace plus one word (identifier characters) or one run of other symbols.
function M.word(text)
  local chunk = text:match('^%s*[%w_]+') or text:match('^%s*[^%w_%s]+') or text:match('^%s+')
  return chunk or text
end

return M

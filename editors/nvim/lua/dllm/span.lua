-- Where a suggestion's range lies in the buffer as it is now, and what accepting it types and
-- deletes (both drawing modes: dllm.suggest on 0.11, dllm.native on 0.12).
--
-- A server range may end after the cursor: it replaces text there (the blanks of a `{ | }` body
-- at column 0, a closer such as `)`). Its positions are those of the text the request was made
-- on; typing at the cursor since (the suggestion typed through, a closer a plugin auto-paired)
-- shifts the text after the cursor to the right, so the range end is found again from what
-- followed it on its line then, which typing at the cursor leaves alone. Inserting at the cursor
-- without deleting that part left it after the accepted text (`x)` over `)` gave `x))`).
local M = {}

---@class dllm.Origin the request's cursor and its line's text then
---@field row integer 0-based
---@field col integer byte column
---@field line string

---@class dllm.Placed
---@field rest string the suggestion after what is typed of it since its range start
---@field replaced string the buffer text from the cursor to the range end (as it is now)
---@field row integer the cursor, 0-based
---@field col integer

--- The origin of a request made now at `win`'s cursor in `bufnr`.
---@return dllm.Origin?
function M.origin(bufnr, win)
  if win == -1 then
    return nil
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(win))
  row = row - 1
  return { row = row, col = col, line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or '' }
end

--- `text` over `range` ({srow, scol, erow, ecol}, 0-based bytes of the request's text; nil: at the
--- cursor) at `win`'s cursor now; `origin` (nil: unknown) where the request was made. nil when the
--- buffer no longer agrees with the suggestion: the cursor left the range's line or went before its
--- start, what is typed inside it is not how the suggestion begins, or the text after the range
--- end was changed.
---@return dllm.Placed?
function M.place(bufnr, win, text, range, origin)
  if win == -1 or type(text) ~= 'string' then
    return nil
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(win))
  row = row - 1
  local srow, scol, erow, ecol = row, col, row, col
  if range then
    srow, scol, erow, ecol = range[1], range[2], range[3], range[4]
  end
  if srow ~= row or scol > col then
    return nil
  end
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
  local typed = line:sub(scol + 1, col)
  if text:sub(1, #typed) ~= typed then
    return nil
  end
  if origin and origin.row == row and erow == row then
    if ecol > origin.col then
      local tail = origin.line:sub(ecol + 1)
      local at = #line - #tail
      if at < col or line:sub(at + 1) ~= tail then
        return nil
      end
      ecol = at
    else
      ecol = col -- it ended at the request's cursor (or before): nothing after the cursor is replaced
    end
  end
  local replaced = ''
  if erow > row or (erow == row and ecol > col) then
    local last = vim.api.nvim_buf_line_count(bufnr) - 1
    if erow > last then
      erow, ecol = last, #(vim.api.nvim_buf_get_lines(bufnr, last, last + 1, false)[1] or '')
    end
    replaced = table.concat(vim.api.nvim_buf_get_text(bufnr, row, col, erow, ecol, {}), '\n')
  end
  return { rest = text:sub(#typed + 1), replaced = replaced, row = row, col = col }
end

--- What accepting all of it types at the cursor, and how many characters after the cursor go
--- first (the replaced part). A text that ends with the replaced part keeps it rather than
--- deleting it and typing it again.
---@param placed dllm.Placed
---@return string, integer
function M.insertion(placed)
  local rest, replaced = placed.rest, placed.replaced
  if replaced == '' then
    return rest, 0
  end
  if #rest >= #replaced and rest:sub(-#replaced) == replaced then
    return rest:sub(1, #rest - #replaced), 0
  end
  return rest, vim.fn.strchars(replaced, true)
end

--- What is still to insert as the user sees it (the ghost text, and what accepting a line or a
--- word takes from): `rest`, less the replaced part of the cursor's line where the suggestion's
--- first line ends with it, as that part stays on the screen after the ghost text (an
--- auto-paired `)` is not drawn twice).
---@param placed dllm.Placed
---@return string
function M.shown(placed)
  local rest, replaced = placed.rest, placed.replaced
  if replaced == '' or replaced:find('\n', 1, true) then
    return rest
  end
  local first_line_end = rest:find('\n', 1, true)
  local first = first_line_end and rest:sub(1, first_line_end - 1) or rest
  if #first >= #replaced and first:sub(-#replaced) == replaced then
    first = first:sub(1, #first - #replaced)
    return first .. (first_line_end and rest:sub(first_line_end) or '')
  end
  return rest
end

return M

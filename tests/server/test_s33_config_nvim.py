"""The pull model with a real Neovim client: Neovim answers workspace/configuration from its
client's `settings` (the plugin gives it `settings = { dllm = opts.server }`), so a user's
`client.settings` changed and announced with `settings: null` reaches the server; before, the
server never asked and the change was ignored. Headless Neovim, its built-in LSP client, the real
server over stdio and a tiny model."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from editors import tools

pytestmark = [pytest.mark.editor, pytest.mark.timeout(180)]

SCRIPT = r"""
local out, dir, python, model, log = _G.arg[1], _G.arg[2], _G.arg[3], _G.arg[4], _G.arg[5]
local got = {}
local buf = vim.api.nvim_create_buf(true, false)
vim.api.nvim_buf_set_name(buf, dir .. '/a.py')
vim.bo[buf].filetype = 'python'
local id = vim.lsp.start({
  name = 'dllm',
  cmd = { python, '-m', 'dllm_lsp', 'serve', '--stdio', '--log-file', log },
  root_dir = dir,
  init_options = { model = model, device = 'cpu' },
  settings = { dllm = { contextTokens = 300 } },
}, { bufnr = buf })
local client = vim.lsp.get_client_by_id(id)

local function status()
  local answer = client:request_sync('dllm/status', {}, 20000, buf)
  return answer and answer.result or {}
end

-- polled with plain waits: request_sync waits itself, and waits do not nest
local function until_status(ok, ms)
  local deadline = vim.uv.now() + ms
  local s = status()
  while not ok(s) and vim.uv.now() < deadline do
    vim.wait(100)
    s = status()
  end
  return s
end

vim.wait(30000, function() return client.initialized end, 50)
local s = until_status(function(s) return (s.loaded or s.error ~= nil and s.error ~= vim.NIL) and not s.loading end, 60000)
got.loaded, got.first = s.loaded, s.contextTokens

-- what a user (or a plugin) does to change a running client's settings in Neovim
client.settings.dllm.contextTokens = 200
client:notify('workspace/didChangeConfiguration', { settings = vim.NIL })
got.pulled = until_status(function(s) return s.contextTokens == 200 end, 20000).contextTokens

client:stop()
vim.wait(5000, function() return client:is_stopped() end, 50)
vim.fn.writefile({ vim.json.encode(got) }, out)
"""


@pytest.mark.parametrize("version", ["0.11", "0.12"])
def test_neovim_answers_the_pull_from_its_client_settings(tmp_path, tiny_model_dir, version):
    nvim = tools.nvim(version)
    script, out = tmp_path / "pull.lua", tmp_path / "got.json"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {"HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([str(nvim), "--headless", "--clean", "-l", str(script), str(out), str(tmp_path),
                          sys.executable, str(tiny_model_dir), str(tmp_path / "server.log")],
                         capture_output=True, text=True, timeout=150, env=env)
    assert run.returncode == 0 and out.exists(), (run.stdout, run.stderr)
    got = json.loads(out.read_text(encoding="utf-8"))
    assert got["loaded"] is True, got
    assert got["first"] == 300, got    # pushed by Neovim at start, and pulled
    assert got["pulled"] == 200, got   # pulled only: the notification carries no settings

"""A real Neovim in a real terminal: nvim runs in its own tmux server (keys go in with send-keys,
the screen comes out with capture-pane), and the plugin's state is read over nvim's RPC socket
with `nvim --server SOCK --remote-expr`."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

from . import tools

INIT_LUA = Path(__file__).resolve().parent / "nvim" / "init.lua"


class NvimSession:
    def __init__(self, nvim: Path, workdir: Path, file: str, model: Path, native: bool = True,
                 width: int = 100, height: int = 24, tcp: str | None = None, token: str | None = None,
                 server_options: dict | None = None):
        self.nvim, self.workdir, self.file = nvim, workdir, file
        self.socket = workdir / "nvim.sock"
        self.tmux_name = f"dllm-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.tmux = str(tools.tmux())
        env = dict(os.environ)
        env.update({
            "DLLM_NVIM_PLUGIN": str(tools.REPO / "editors" / "nvim"),
            "DLLM_TEST_MODEL": str(model),
            "DLLM_TEST_PYTHON": sys.executable,
            "DLLM_NVIM_NATIVE": "1" if native else "0",
            "DLLM_TEST_TCP": tcp or "",
            "DLLM_TEST_TOKEN": token or "",
            "DLLM_TEST_SERVER_OPTIONS": json.dumps(server_options) if server_options else "",
            "TERM": "xterm-256color",
            "COLORTERM": "truecolor",
            "XDG_STATE_HOME": str(workdir / "state"),   # nvim's LSP log stays with the test
        })
        command = f"'{nvim}' --listen '{self.socket}' -u '{INIT_LUA}' '{file}'"
        self._tmux("new-session", "-d", "-s", "main", "-x", str(width), "-y", str(height), command, env=env)

    def _tmux(self, *args: str, env: dict | None = None) -> str:
        out = subprocess.run([self.tmux, "-L", self.tmux_name, *args], capture_output=True, text=True,
                             cwd=self.workdir, env=env, timeout=30)
        if out.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {out.stderr.strip()}")
        return out.stdout

    def close(self) -> None:
        subprocess.run([self.tmux, "-L", self.tmux_name, "kill-server"], capture_output=True, timeout=30)

    def __enter__(self) -> "NvimSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- input -------------------------------------------------------------------------------
    def keys(self, *keys: str) -> None:
        """tmux key names: "Tab", "Escape", "Enter", "M-w", ..."""
        self._tmux("send-keys", "-t", "main", *keys)

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-t", "main", "-l", text)

    # --- output ------------------------------------------------------------------------------
    def expr(self, expression: str, timeout: float = 10) -> str:
        out = subprocess.run([str(self.nvim), "--headless", "--clean", "--server", str(self.socket),
                              "--remote-expr", expression], capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"--remote-expr failed: {out.stderr.strip() or out.stdout.strip()}")
        return out.stdout

    def state(self) -> dict:
        return json.loads(self.expr('luaeval("dllm_test_state()")'))

    def lua(self, code: str) -> object:
        """Evaluates a Lua expression in nvim; the value comes back through JSON."""
        escaped = code.replace("\\", "\\\\").replace('"', '\\"')
        return json.loads(self.expr(f'luaeval("vim.json.encode({escaped})")'))

    def wait(self, predicate, timeout: float = 60, what: str = "condition") -> dict:
        deadline = time.monotonic() + timeout
        last: dict | None = None
        error: Exception | None = None
        while time.monotonic() < deadline:
            if self.socket.exists():
                try:
                    last = self.state()
                    if predicate(last):
                        return last
                except (RuntimeError, json.JSONDecodeError, subprocess.TimeoutExpired) as exc:
                    error = exc
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; last state {last}; last error {error}; "
                             f"screen:\n{self.screen()}")

    def wait_screen(self, needle: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if needle in screen or time.monotonic() > deadline:
                assert needle in screen, f"{needle!r} not on the screen:\n{screen}"
                return screen
            time.sleep(0.2)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-t", "main", "-p")

    def screenshot(self, png: Path, chromium: Path, width: int = 900, height: int = 470) -> Path:
        """The terminal as a picture: capture-pane with colours -> aha (ANSI to HTML) -> Chromium."""
        aha = shutil.which("aha")
        if aha is None:
            tools.missing("aha not found (Debian package `aha`, turns the terminal into HTML)")
        ansi = self._tmux("capture-pane", "-t", "main", "-p", "-e")
        html = subprocess.run([aha, "--black", "--no-header"], input=ansi, capture_output=True,
                              text=True, timeout=30).stdout
        page = self.workdir / "screen.html"
        page.write_text(
            "<html><head><meta charset='utf-8'><style>body{margin:0;background:#14161b;}"
            "pre{margin:8px;font:14px/1.25 'DejaVu Sans Mono',monospace;color:#e0e2ea;}</style></head>"
            f"<body><pre>{html}</pre></body></html>", encoding="utf-8")
        png.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(chromium), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri()],
                       capture_output=True, timeout=120, check=True)
        return png

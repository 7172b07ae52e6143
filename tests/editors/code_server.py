"""code-server (VS Code 1.100 in the browser) with the built .vsix installed into a fresh profile,
pointed at the real server; scenarios are played by vscode/driver.js (playwright-core + Chromium)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from dllm_lsp.net import free_port

from . import tools

DRIVER = Path(__file__).resolve().parent / "vscode" / "driver.js"


class CodeServer:
    def __init__(self, workspace: Path, model: Path, home: Path, settings: dict | None = None):
        self.workspace, self.home = workspace, home
        self.binary = tools.code_server()
        self.chromium = tools.chromium()
        self.node = tools.node()
        self.modules = tools.playwright_modules()
        vsix = tools.vsix()
        self.extensions = home / "extensions"
        self.user_data = home / "user-data"
        (self.user_data / "User").mkdir(parents=True, exist_ok=True)
        user_settings = {
            "dllm.server.command": [sys.executable, "-m", "dllm_lsp", "serve", "--stdio"],
            "dllm.model": str(model),
            "dllm.device": "cpu",
            "workbench.startupEditor": "none",
            "workbench.tips.enabled": False,
            "workbench.enableExperiments": False,
            "security.workspace.trust.enabled": False,
            "telemetry.telemetryLevel": "off",
            "update.mode": "none",
            "extensions.autoCheckUpdates": False,
            "extensions.autoUpdate": False,
            "editor.inlineSuggest.enabled": True,
            "editor.quickSuggestions": {"other": False, "comments": False, "strings": False},
            "editor.minimap.enabled": False,
            "editor.fontSize": 15,
            "files.autoSave": "off",
            "chat.commandCenter.enabled": False,
            "workbench.colorTheme": "Default Dark Modern",
        }
        user_settings.update(settings or {})
        (self.user_data / "User" / "settings.json").write_text(json.dumps(user_settings, indent=2))
        self.env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / "config"),
                        XDG_DATA_HOME=str(home / "data"))
        common = ["--extensions-dir", str(self.extensions), "--user-data-dir", str(self.user_data)]
        installed = subprocess.run([str(self.binary), *common, "--install-extension", str(vsix)],
                                   capture_output=True, text=True, env=self.env, timeout=180)
        assert installed.returncode == 0, f"installing the .vsix failed: {installed.stdout}{installed.stderr}"
        self.port = free_port()
        self.log = open(home / "code-server.log", "w")
        self.process = subprocess.Popen(
            [str(self.binary), *common, "--auth", "none", "--bind-addr", f"127.0.0.1:{self.port}",
             "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust",
             "--disable-getting-started-override", "--config", str(home / "config.yaml"), str(workspace)],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
        )
        self._wait_http()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?folder={self.workspace}"

    def _wait_http(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"code-server exited: {(self.home / 'code-server.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                    return
            except OSError:
                time.sleep(0.3)
        raise AssertionError("code-server did not answer on /healthz")

    def play(self, scenario: dict, timeout: float = 300) -> dict:
        scenario = dict(scenario, url=self.url)
        path = self.home / "scenario.json"
        path.write_text(json.dumps(scenario))
        env = dict(self.env, DLLM_PLAYWRIGHT_MODULES=str(self.modules), DLLM_CHROMIUM=str(self.chromium))
        out = subprocess.run([str(self.node), str(DRIVER), str(path)], capture_output=True, text=True,
                             env=env, timeout=timeout)
        lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
        assert lines, f"driver printed nothing: {out.stderr[-3000:]}"
        return json.loads(lines[-1])

    def servers_command(self) -> list[str]:
        """A command printing, as JSON, the pids of the dllm-lsp servers under this code-server
        (the driver runs it in the middle of a scenario, while the window's extension host lives)."""
        return [sys.executable, "-c", _LIST_SERVERS, str(self.process.pid)]

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, 15)   # code-server and the extension host with the server
                self.process.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, 9)
        self.log.close()

    def __enter__(self) -> "CodeServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# Walks /proc from a pid down; prints the pids whose command line runs the dllm-lsp server.
_LIST_SERVERS = """
import json, os, sys
children = {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/stat") as f:
            parent = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\\0", b" ").decode(errors="replace")
    except OSError:
        continue
    children.setdefault(parent, []).append((int(pid), command))
found, todo = [], [int(sys.argv[1])]
while todo:
    for pid, command in children.get(todo.pop(), []):
        todo.append(pid)
        if "dllm_lsp serve" in command or "dllm-lsp serve" in command:
            found.append(pid)
print(json.dumps(found))
"""

"""VS Code extension fixes found by using it as a user would (code-server 4.100.3 in Chromium, the
real server over stdio, the tiny model): a server that had stopped for good looked like a running
one in the status bar (and a click toggled completions instead of bringing it back), the tooltip
said "loaded: false" after every start and model change until the next completion, every line the
server logged showed as "[error]" in the output channel, and a setting that no longer exists
(`dllm.healTypedWord`) was offered and did nothing."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from dllm_lsp.options import BY_WIRE

from .code_server import CodeServer

REPO = Path(__file__).resolve().parents[2]

# Played in code-server by playwright-core, as tests/editors/vscode/driver.js plays its scenarios
# (same page setup and status-bar lookup); prints one JSON object with what it saw.
SCENARIO = r"""
"use strict";
const path = require("path");
const fs = require("fs");
const { execFileSync } = require("child_process");
const { chromium } = require(path.join(process.env.DLLM_PLAYWRIGHT_MODULES, "playwright-core"));
const scenario = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(fn, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last) return last;
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
}

// The dllm status-bar item: its text, and its aria-label (the icon's name, the text, the tooltip).
const STATUS = () => {
  const item = [...document.querySelectorAll(".statusbar-item")].find((e) => /^dllm( ·|$| \()/.test((e.textContent || "").trim()));
  return item ? { text: item.textContent.trim(), label: item.getAttribute("aria-label") || "" } : null;
};

// Opens a quick pick with `key` (none: one a command just opened) and picks the row `what`.
async function quickPick(page, key, typed, what) {
  if (key) await page.keyboard.press(key);
  else await sleep(800); // the command's own pick replaces the one it was chosen in
  await page.waitForSelector(".quick-input-widget input", { state: "visible" });
  await page.keyboard.type(typed, { delay: 20 });
  await waitFor(
    () => page.evaluate((t) => [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes(t)), what),
    30000, what);
  await page.keyboard.press("Enter");
}

// The lines of the output panel's editor, in order (its DOM keeps them in no particular order).
const OUTPUT = () => {
  const editor = document.querySelector(".panel .monaco-editor .view-lines");
  if (!editor) return null;
  return [...editor.querySelectorAll(".view-line")]
    .map((l) => [parseFloat(l.style.top), l.textContent.replace(/\u00a0/g, " ")])
    .sort((a, b) => a[0] - b[0]).map((x) => x[1]).join("\n");
};

const servers = () => JSON.parse(execFileSync(scenario.serversCommand[0], scenario.serversCommand.slice(1), { encoding: "utf8" }));
const status = (page) => page.evaluate(STATUS);
const notifications = (page) => page.evaluate(() => [...document.querySelectorAll(".notification-list-item-message")].map((e) => e.textContent));

async function play(page, out) {
  await quickPick(page, "Control+P", scenario.file, scenario.file);
  await page.waitForSelector(`.tab[aria-label^="${scenario.file}"]`, { timeout: 30000 });
  await waitFor(async () => ((await status(page)) || { text: "" }).text.includes(scenario.model), 120000, "the status-bar item");

  // 1. The output channel: the server's log lines at their own level.
  await quickPick(page, "F1", "Output: Show Output Channels", "Output: Show Output Channels");
  await quickPick(page, null, "dllm-lsp", "dllm-lsp");
  out.output = await waitFor(async () => {
    const text = await page.evaluate(OUTPUT);
    return text && / loaded /.test(text) ? text : null;
  }, 60000, "the server's log in the output channel").catch(() => page.evaluate(OUTPUT));

  // 2. Another model chosen in the workspace's settings while the server runs: the status bar
  // names it and, without a completion asked for, says when it has loaded.
  fs.mkdirSync(path.dirname(scenario.settingsFile), { recursive: true });
  fs.writeFileSync(scenario.settingsFile, JSON.stringify({ "dllm.model": scenario.otherModel }));
  const named = await waitFor(async () => {
    const s = await status(page);
    return s && s.label.includes(`model: ${scenario.otherModelName} `) ? s : null;
  }, 60000, "the status bar to name the other model");
  out.afterModelChange = await waitFor(async () => {
    const s = await status(page);
    return s && s.label.includes("loaded: true") ? s : null;
  }, 30000, "the tooltip to say loaded").catch(() => status(page)) || named;

  // 3. The server killed 5 times, each once it runs (a kill during its initialize fails the
  // start instead): vscode-languageclient restarts it 4 times, then gives up.
  const killed = new Set();
  for (let i = 0; i < 5; i++) {
    const running = await waitFor(async () => {
      const now = servers().filter((p) => !killed.has(p));
      return now.length && ((await status(page)) || { label: "" }).label.includes("server: running") ? now : null;
    }, 60000, `server ${i + 1} to run`);
    for (const pid of running) {
      killed.add(pid);
      process.kill(pid, "SIGKILL");
    }
  }
  await waitFor(async () => (await notifications(page)).some((n) => n.includes("will not be restarted")), 60000, "the client to give up");
  await waitFor(async () => ((await status(page)) || { label: "" }).label.includes("server: stopped"), 30000, "the client to stop");
  out.stopped = await status(page);

  // 4. A click on the item while the server is down.
  await page.evaluate(() => {
    const item = [...document.querySelectorAll(".statusbar-item")].find((e) => /^dllm( ·|$| \()/.test((e.textContent || "").trim()));
    (item.querySelector("a") || item).click();
  });
  out.afterClick = await waitFor(async () => {
    const s = await status(page);
    return s && s.label.includes("server: running") && s.label.includes("loaded: true") ? s : null;
  }, 60000, "the server to run again").catch(() => status(page));
  out.serversAfterClick = servers().filter((p) => !killed.has(p));
}

(async () => {
  const out = { ok: false };
  const browser = await chromium.launch({
    executablePath: process.env.DLLM_CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1300, height: 700 } });
    await page.goto(scenario.url, { timeout: 120000 });
    await page.waitForSelector(".monaco-workbench", { timeout: 120000 });
    await play(page, out);
    out.ok = true;
  } catch (err) {
    out.error = String((err && err.stack) || err);
  } finally {
    await browser.close();
    process.stdout.write(JSON.stringify(out) + "\n");
  }
})();
"""


def run_scenario(server: CodeServer, scenario: dict, home: Path) -> dict:
    script, params = home / "scenario-s33.js", home / "scenario-s33.json"
    script.write_text(SCENARIO, encoding="utf-8")
    params.write_text(json.dumps(dict(scenario, url=server.url)), encoding="utf-8")
    env = dict(server.env, DLLM_PLAYWRIGHT_MODULES=str(server.modules), DLLM_CHROMIUM=str(server.chromium))
    done = subprocess.run([str(server.node), str(script), str(params)], capture_output=True, text=True, env=env,
                          timeout=420)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"the scenario printed nothing: {done.stderr[-3000:]}"
    return json.loads(lines[-1])


@pytest.mark.editor
@pytest.mark.timeout(600)
def test_status_bar_and_log_follow_the_server(tmp_path, editor_model):
    """The log's levels, a model change followed to its load, a server that stopped for good shown
    as stopped, and a click that brings it back."""
    from dllm_lsp.arch.tiny import write_tiny_model

    other = write_tiny_model(tmp_path / "models" / "tiny-other")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "demo.txt").write_text("alpha beta gamma\n", encoding="utf-8")
    with CodeServer(workspace, editor_model, tmp_path / "home") as vscode:
        seen = run_scenario(vscode, {
            "file": "demo.txt", "model": editor_model.name, "serversCommand": vscode.servers_command(),
            "settingsFile": str(workspace / ".vscode" / "settings.json"),
            "otherModel": str(other), "otherModelName": other.name,
        }, tmp_path / "home")
    assert seen["ok"], (seen.get("error"), seen)

    # The server's INFO lines are info, not errors (vscode-languageclient writes stderr as errors).
    log = seen["output"]
    assert re.search(r"\[info\] dllm_lsp\.server\.app: loaded", log), log
    assert not re.search(r"\[error\].* INFO ", log), log
    # The server pulls its settings (workspace/configuration): the extension answers with the
    # server options only, never its own settings (server.token, server.command).
    # (the output panel wraps long lines: read with its line breaks taken out, up to the next record)
    flat = log.replace("\n", "")
    pulled = re.findall(r"the client's dllm section holds (.*?)(?=\d{4}-\d\d-\d\d \d\d:|$)", flat)
    assert pulled and all("server" not in keys and "enabled" not in keys for keys in pulled), pulled

    # The model named in the workspace's settings reached the running server, and the tooltip
    # followed its load without a completion being asked for.
    assert f"model: {other.name} " in seen["afterModelChange"]["label"], seen
    assert "loaded: true" in seen["afterModelChange"]["label"], seen

    # Stopped for good: the item says so, and that a click restarts it.
    stopped = seen["stopped"]
    assert "server stopped" in stopped["text"], stopped
    assert "click to restart" in stopped["label"], stopped
    # The click restarted the server (one runs, the item says running) and left completions on.
    after = seen["afterClick"]
    assert "server: running" in after["label"] and "loaded: true" in after["label"], after
    assert len(seen["serversAfterClick"]) == 1, seen
    assert "(off)" not in after["text"] and "stopped" not in after["text"], after


def test_every_setting_the_extension_offers_does_something():
    """Each `dllm.*` setting of package.json is a server option (forwarded) or one the extension
    reads itself: `dllm.healTypedWord` (the server's option became `healTyped`) was still
    offered, with its own description, and reached nothing."""
    package = json.loads((REPO / "editors/vscode/package.json").read_text(encoding="utf-8"))
    settings_ts = (REPO / "editors/vscode/src/settings.ts").read_text(encoding="utf-8")
    read_by_extension = set(re.findall(r'\.get(?:<[^>]*>)?\("([\w.]+)"', settings_ts))
    assert {"enabled", "streaming", "server.command"} <= read_by_extension, read_by_extension
    dead = [key for key in package["contributes"]["configuration"]["properties"]
            if key.removeprefix("dllm.") not in BY_WIRE and key.removeprefix("dllm.") not in read_by_extension]
    assert dead == [], f"settings that neither reach the server nor the extension: {dead}"

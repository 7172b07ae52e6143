// Drives code-server in Debian's Chromium with playwright-core, like a person would: open a file,
// type, watch the ghost text, accept it, save; or run the "Fill holes" refactoring.
// Usage: node driver.js SCENARIO.json  (prints one JSON object with what it saw)
// Env: DLLM_PLAYWRIGHT_MODULES (node_modules holding playwright-core), DLLM_CHROMIUM.
"use strict";
const path = require("path");
const fs = require("fs");
const { chromium } = require(path.join(process.env.DLLM_PLAYWRIGHT_MODULES, "playwright-core"));

const scenario = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const log = [];
const note = (msg) => log.push(`${new Date().toISOString()} ${msg}`);

// Ghost text of the focused editor, or null: the inline part (decorations inside the cursor's line)
// and the lines VS Code adds below it; spaces are rendered as non-breaking spaces. Kept as source
// that runs in the page, so the observer that watches every redraw (watchGhosts) reads it the same way.
const READ_GHOST = `() => {
  const editor = document.querySelector(".monaco-editor.focused") || document.querySelector(".monaco-editor");
  if (!editor) return null;
  const inline = [...editor.querySelectorAll(".view-lines .ghost-text-decoration, .view-lines .ghost-text-decoration-preview")]
    .map((e) => e.textContent).join("");
  const blocks = [...editor.querySelectorAll(".ghost-text .view-line")].map((e) => e.textContent);
  if (!inline && !blocks.length) return null;
  return [inline, ...blocks].join("\\n").replace(/\\u00a0/g, " ");
}`;

async function ghostText(page) {
  return page.evaluate(`(${READ_GHOST})()`);
}

// VS Code's inline suggestion toolbar: "2/3" is the second of three items.
async function suggestionCount(page) {
  return page.evaluate(() => {
    const item = document.querySelector(".inlineSuggestionsHints .availableSuggestionCount");
    return item ? item.textContent.trim() : null;
  });
}

async function statusBarText(page) {
  return page.evaluate(() => {
    const item = [...document.querySelectorAll(".statusbar-item")].find((e) => /^dllm( ·|$| \()/.test((e.textContent || "").trim()));
    return item ? item.textContent.trim() : null;
  });
}

async function waitFor(fn, timeoutMs, what, pollMs = 100) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, pollMs));
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
}

async function openFile(page, name) {
  await page.keyboard.press("Control+P");
  await page.waitForSelector(".quick-input-widget input", { state: "visible" });
  await page.keyboard.type(name, { delay: 20 });
  await waitFor(
    () => page.evaluate((n) => [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes(n)), name),
    30000, `${name} in quick open`);
  await page.keyboard.press("Enter");
  await page.waitForSelector(`.tab[aria-label^="${name}"]`, { timeout: 30000 });
  await page.waitForSelector(".monaco-editor .view-lines", { timeout: 30000 });
  await page.click(".monaco-editor .view-lines");
  note(`opened ${name}`);
}

async function goTo(page, line, column) {
  await page.keyboard.press("Control+G");
  await page.waitForSelector(".quick-input-widget input", { state: "visible" });
  await page.keyboard.type(`${line}:${column}`, { delay: 20 });
  await page.keyboard.press("Enter");
  await page.waitForTimeout(300);
}

async function runCommand(page, title) {
  await page.keyboard.press("F1");
  await page.waitForSelector(".quick-input-widget input", { state: "visible" });
  await page.keyboard.type(title, { delay: 20 });
  await waitFor(
    () => page.evaluate((t) => [...document.querySelectorAll(".quick-input-list .monaco-list-row")].some((r) => r.textContent.includes(t)), title),
    20000, `command ${title}`);
  await page.keyboard.press("Enter");
}

// Records every ghost text the page renders, however briefly (a streamed completion of a small
// model can redraw faster than any polling sees): a MutationObserver reads it after each change.
async function watchGhosts(page) {
  await page.evaluate(`(() => {
    const read = ${READ_GHOST};
    window.__dllmGhosts = [];
    new MutationObserver(() => {
      const ghost = read();
      const all = window.__dllmGhosts;
      if (ghost && all[all.length - 1] !== ghost) all.push(ghost);
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  })()`);
}

async function complete(page, out) {
  await goTo(page, scenario.line, scenario.column);
  await watchGhosts(page);
  await page.keyboard.type(scenario.typed, { delay: 40 });
  // Every distinct ghost text seen, in order: a streamed completion shows more than one.
  const seen = [];
  const deadline = Date.now() + scenario.timeoutMs;
  let ghost = null;
  while (Date.now() < deadline) {
    ghost = await ghostText(page);
    if (ghost && seen[seen.length - 1] !== ghost) {
      seen.push(ghost);
      note(`ghost ${JSON.stringify(ghost)}`);
    }
    if (ghost && ghost === scenario.expectGhost) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  // What the observer saw after the last keystroke's stream began: the ghost texts of the final
  // cursor position (earlier positions' ghosts are dropped: they end with the typed text's tail).
  const observed = await page.evaluate(() => window.__dllmGhosts || []);
  const finalStates = [];
  for (const g of observed) {
    if (scenario.expectGhost && (scenario.expectGhost.startsWith(g) || g === scenario.expectGhost)) finalStates.push(g);
  }
  out.ghostHistory = finalStates.length > seen.length ? finalStates : seen;
  out.ghostObserved = observed;
  out.ghost = ghost;
  out.statusBar = await statusBarText(page);
  if (scenario.screenshot) {
    await page.screenshot({ path: scenario.screenshot });
  }
  if (ghost !== scenario.expectGhost) return;
  await page.keyboard.press("Tab");
  await waitFor(async () => (await ghostText(page)) === null, 10000, "the ghost text to go after Tab");
  await page.keyboard.press("Control+S");
  await page.waitForTimeout(800);
  out.accepted = true;
}

async function fillHoles(page, out) {
  await goTo(page, scenario.line, scenario.column);
  await runCommand(page, "Refactor...");
  const item = await waitFor(
    () => page.evaluate(() => {
      const rows = [...document.querySelectorAll(".action-widget .monaco-list-row, .context-view .action-label")];
      const row = rows.find((r) => /Fill \d+ holes? with dllm/.test(r.textContent || ""));
      return row ? row.textContent.trim() : null;
    }),
    30000, "the Fill holes refactoring");
  out.action = item;
  if (scenario.screenshot) await page.screenshot({ path: scenario.screenshot });
  await page.keyboard.press("Enter");
  // Either the server's edit arrives (the editor becomes dirty) or the extension says why not.
  const outcome = await waitFor(
    () => page.evaluate(() => {
      if (document.querySelector(".tab.dirty")) return { edited: true };
      const toast = [...document.querySelectorAll(".notification-list-item-message")].map((e) => e.textContent).find((t) => /dllm/.test(t));
      return toast ? { message: toast } : null;
    }),
    scenario.timeoutMs, "the holes to be filled or a message");
  out.outcome = outcome;
  if (outcome.edited) {
    await page.keyboard.press("Control+S");
    await page.waitForTimeout(800);
  }
}

async function nextEdits(page, out) {
  // The server finds a change by comparing with the versions it was asked about before.
  await runCommand(page, "dllm: Suggest next edits");
  await page.waitForTimeout(1500);
  await goTo(page, scenario.line, scenario.column);
  await page.keyboard.press("Control+D"); // select the word at the cursor
  await page.keyboard.type(scenario.typed, { delay: 40 });
  await page.keyboard.press("Escape");
  await runCommand(page, "dllm: Suggest next edits");
  out.statusBar = await waitFor(async () => {
    const text = await statusBarText(page);
    return text && /next edit/.test(text) ? text : null;
  }, scenario.timeoutMs, "the next edits in the status bar");
  // The preview: the new text is an `after` decoration, drawn by CSS. The editor draws it a frame
  // or more after the status bar changes (on a loaded machine, later): wait for it, then read.
  const previewNow = () => page.evaluate(() =>
    [...document.querySelectorAll(".view-lines span")]
      .map((e) => getComputedStyle(e, "::after").content)
      .filter((c) => c && c !== "none" && c.includes("\u2192")));
  const listed = Number((out.statusBar.match(/(\d+) next edits?/) || [0, 1])[1]);
  out.preview = await waitFor(async () => {
    const drawn = await previewNow();
    return drawn.length >= listed ? drawn : null;
  }, 10000, "the next edits' preview").catch(() => previewNow());
  if (scenario.screenshot) await page.screenshot({ path: scenario.screenshot });
  // Accept the nearest one (Alt+]), then the rest (Alt+Enter).
  await page.keyboard.press("Alt+]");
  const before = Number(out.statusBar.match(/(\d+) next edits?/)[1]);
  out.afterAcceptOne = await waitFor(async () => {
    const text = await statusBarText(page);
    const left = text && text.match(/(\d+) next edits?/);
    return left && Number(left[1]) === before - 1 ? text : null;
  }, 10000, "one edit to be applied");
  out.textAfterAcceptOne = await page.evaluate(() => document.querySelector(".monaco-editor .view-lines").innerText.replace(/\u00a0/g, " "));
  await page.keyboard.press("Alt+Enter");
  await waitFor(async () => !/next edit/.test((await statusBarText(page)) || ""), 10000, "the preview to go");
  await page.keyboard.press("Control+S");
  await page.waitForTimeout(800);
}

async function waitGhost(page, expected, timeoutMs) {
  return waitFor(async () => ((await ghostText(page)) === expected ? true : null), timeoutMs, `ghost text ${JSON.stringify(expected)}`);
}

async function clickStatusBar(page) {
  await page.evaluate(() => {
    const item = [...document.querySelectorAll(".statusbar-item")].find((e) => /^dllm( ·|$| \()/.test((e.textContent || "").trim()));
    (item.querySelector("a") || item).click();
  });
}

// The server's alternatives (dllm.alternatives > 1): the greedy suggestion first, then VS Code's
// own Alt+] / Alt+[ cycle through the items of the answer; Tab inserts the one shown.
async function cycle(page, out) {
  await goTo(page, scenario.line, scenario.column);
  await page.keyboard.type(scenario.typed, { delay: 40 });
  // The first Alt+] goes at the first ghost text, while the server is still denoising (a slow
  // stream): VS Code then holds the report's one item (the toolbar says so, kept in countAtPress).
  // The extension's Alt+] waits for the final answer with the alternatives before VS Code cycles,
  // so the press shows the second of the server's items, not nothing.
  out.ghostAtPress = await waitFor(() => ghostText(page), scenario.timeoutMs, "a first ghost text", 5);
  out.countAtPress = await suggestionCount(page);
  await page.keyboard.press("Alt+BracketRight");
  out.counts = [await waitFor(async () => {
    const count = await suggestionCount(page);
    return count && /^2\/([2-9]|\d\d+)$/.test(count) ? count : null;
  }, 20000, "Alt+], pressed while the stream ran, to show the second of the server's items")];
  const shown = [scenario.expectGhost, await waitFor(async () => {
    const g = await ghostText(page);
    return g && g !== scenario.expectGhost ? g : null;
  }, 20000, "the second item's ghost text")];
  note(`Alt+] ghost ${JSON.stringify(shown[1])} (pressed at ${JSON.stringify(out.countAtPress)})`);
  for (let i = 1; i < scenario.presses; i++) {
    const before = await ghostText(page);
    await page.keyboard.press("Alt+BracketRight");
    const ghost = await waitFor(async () => {
      const g = await ghostText(page);
      return g && g !== before ? g : null;
    }, 20000, `Alt+] to show another suggestion than ${JSON.stringify(before)}`);
    note(`Alt+] ghost ${JSON.stringify(ghost)}`);
    shown.push(ghost);
    out.counts.push(await suggestionCount(page));
  }
  out.shown = shown;
  const before = await ghostText(page);
  await page.keyboard.press("Alt+BracketLeft");
  out.back = await waitFor(async () => {
    const g = await ghostText(page);
    return g && g !== before ? g : null;
  }, 20000, "Alt+[ to show the previous suggestion");
  await page.keyboard.press("Tab");
  await waitFor(async () => (await ghostText(page)) === null, 10000, "the ghost text to go after Tab");
  await page.keyboard.press("Control+S");
  await page.waitForTimeout(800);
  out.accepted = true;
}

// Completion over TCP, the manual trigger (Alt+\) and the on/off toggle of the status-bar item.
async function triggerAndToggle(page, out) {
  await goTo(page, scenario.line, scenario.column);
  await page.keyboard.type(scenario.typed, { delay: 40 });
  await waitGhost(page, scenario.expectGhost, scenario.timeoutMs);
  out.automatic = true;
  await page.keyboard.press("Escape");
  await waitFor(async () => ((await ghostText(page)) === null ? true : null), 10000, "Escape to hide the ghost text");
  await page.keyboard.press("Alt+\\");
  await waitGhost(page, scenario.expectGhost, scenario.timeoutMs);
  out.manual = true;
  await clickStatusBar(page);
  out.statusBarOff = await waitFor(async () => {
    const text = await statusBarText(page);
    return text && text.includes("(off)") ? text : null;
  }, 10000, "the status-bar item to say off");
  await waitFor(async () => ((await ghostText(page)) === null ? true : null), 10000, "the ghost text to go when off");
  await page.keyboard.press("Alt+\\");
  await page.waitForTimeout(3000);
  out.ghostWhenOff = await ghostText(page);
  await clickStatusBar(page);
  out.statusBarOn = await waitFor(async () => {
    const text = await statusBarText(page);
    return text && !text.includes("(off)") ? text : null;
  }, 10000, "the status-bar item to say on");
}

// The restart command twice in a row, the second while the first still restarts: one client and
// one server after it, and a status bar that says running (overlapping restarts each started a
// client; the one left over held its server and told the status bar "stopped").
async function restartTwice(page, out) {
  await runCommand(page, "dllm: Restart the language server");
  await runCommand(page, "dllm: Restart the language server");
  const tooltip = () => page.evaluate(() => {
    const item = [...document.querySelectorAll(".statusbar-item")].find((e) => /^dllm( ·|$| \()/.test((e.textContent || "").trim()));
    return item ? item.getAttribute("aria-label") : null;
  });
  await waitFor(async () => ((await tooltip()) || "").includes("server: running") ? true : null, 60000, "the server to run");
  await page.waitForTimeout(6000); // a second client, were there one, would have started by now
  out.tooltip = await tooltip();
  out.servers = await scenarioServers();
  out.notifications = await page.evaluate(() =>
    [...document.querySelectorAll(".notification-list-item-message")].map((e) => e.textContent));
}

/** The dllm-lsp servers running now (the test passes a command that lists them). */
async function scenarioServers() {
  if (!scenario.serversCommand) return null;
  const { execFileSync } = require("child_process");
  return JSON.parse(execFileSync(scenario.serversCommand[0], scenario.serversCommand.slice(1), { encoding: "utf8" }));
}

(async () => {
  const out = { ok: false };
  const browser = await chromium.launch({
    executablePath: process.env.DLLM_CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: scenario.width || 1100, height: scenario.height || 560 } });
    page.on("pageerror", (err) => note(`pageerror ${err.message}`));
    await page.goto(scenario.url, { timeout: 120000 });
    await page.waitForSelector(".monaco-workbench", { timeout: 120000 });
    note("workbench up");
    await openFile(page, scenario.file);
    out.statusBar = await waitFor(async () => {
      const text = await statusBarText(page);
      return text && scenario.statusBarContains.every((s) => text.includes(s)) ? text : null;
    }, 120000, "the dllm status-bar item");
    note(`status bar ${out.statusBar}`);
    if (scenario.kind === "complete") await complete(page, out);
    else if (scenario.kind === "fillHoles") await fillHoles(page, out);
    else if (scenario.kind === "nextEdits") await nextEdits(page, out);
    else if (scenario.kind === "triggerAndToggle") await triggerAndToggle(page, out);
    else if (scenario.kind === "cycle") await cycle(page, out);
    else if (scenario.kind === "restartTwice") await restartTwice(page, out);
    out.ok = true;
  } catch (err) {
    out.error = String(err && err.stack || err);
    try {
      const pages = browser.contexts()[0]?.pages() || [];
      if (pages[0] && scenario.failureScreenshot) await pages[0].screenshot({ path: scenario.failureScreenshot });
    } catch (_) { /* the error above is the one to report */ }
  } finally {
    out.log = log;
    await browser.close();
    process.stdout.write(JSON.stringify(out) + "\n");
  }
})();

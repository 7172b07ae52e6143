// Entry point: starts the language client and wires the features (one module each) to commands.
import * as vscode from "vscode";
import { ExecuteCommandRequest, LanguageClient, LanguageClientOptions, State } from "vscode-languageclient/node";
import { serverOptionsFor } from "./launch";
import { pipeServerStderr, pipeServerStdout } from "./serverLog";
import { NextEdits } from "./nextEdits";
import * as settings from "./settings";
import { DllmStatusBar, ServerStatus } from "./statusBar";
import { isMethodNotFound, StreamingInlineCompletions } from "./streaming";

let client: LanguageClient | undefined;
let statusBar: DllmStatusBar;
let streaming: StreamingInlineCompletions;
let nextEdits: NextEdits;
let statusSupported = true;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  statusBar = new DllmStatusBar(settings.completionsEnabled);
  streaming = new StreamingInlineCompletions(
    () => client,
    settings.completionsEnabled,
    settings.streamingEnabled,
    {
      onLatency: (ms) => {
        statusBar.setLatency(ms);
        void refreshStatus();
      },
      onStreamingSupport: () => undefined,
    },
  );
  nextEdits = new NextEdits(() => client, (n) => statusBar.setPendingEdits(n));
  context.subscriptions.push(statusBar, streaming, nextEdits);

  const command = (id: string, fn: (...args: unknown[]) => unknown) =>
    context.subscriptions.push(vscode.commands.registerCommand(id, fn));
  command("dllm.triggerCompletion", () => vscode.commands.executeCommand("editor.action.inlineSuggest.trigger"));
  command("dllm.toggle", async () => {
    await settings.setCompletionsEnabled(!settings.completionsEnabled());
    statusBar.render();
    if (!settings.completionsEnabled()) await vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
  });
  // Alt+] / Alt+[ (package.json): VS Code's own cycling, once the stream at the cursor has ended
  // and VS Code holds the alternatives (StreamingInlineCompletions.settledAtCursor says why).
  command("dllm.inlineSuggest.showNext", () => cycleInlineSuggestion("showNext"));
  command("dllm.inlineSuggest.showPrevious", () => cycleInlineSuggestion("showPrevious"));
  command("dllm.fillHolesInSelection", fillHolesInSelection);
  command("dllm.nextEdits", () => nextEdits.suggest());
  command("dllm.nextEdits.acceptAll", () => nextEdits.acceptAll());
  command("dllm.nextEdits.acceptOne", () => nextEdits.acceptOne());
  command("dllm.nextEdits.dismiss", () => nextEdits.dismiss());
  command("dllm.restartServer", restartClient);
  command("dllm.showStatus", async () => {
    const status = await refreshStatus();
    void vscode.window.showInformationMessage(`dllm-lsp: ${JSON.stringify(status ?? { error: "no status" })}`);
  });

  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (!e.affectsConfiguration("dllm")) return;
      statusBar.render();
      if (e.affectsConfiguration("dllm.server")) {
        await restartClient();
      } else if (client?.isRunning()) {
        await client.sendNotification("workspace/didChangeConfiguration", {
          settings: { dllm: settings.serverOptions() },
        });
        void followLoad(); // another dllm.model or dllm.device loads now
      }
    }),
  );
  await startClient();
}

/** How long a cycling key waits for the stream at the cursor to end; past it, it cycles what is shown. */
const CYCLE_WAIT_MS = 3000;

async function cycleInlineSuggestion(which: "showNext" | "showPrevious"): Promise<void> {
  await streaming.settledAtCursor(CYCLE_WAIT_MS);
  await vscode.commands.executeCommand(`editor.action.inlineSuggest.${which}`);
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}

/** What went wrong, whatever was thrown (a failed spawn rejects with no Error: "undefined"). */
function message(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (err && typeof err === "object" && "message" in err) return String((err as { message: unknown }).message);
  return String(err);
}

async function startClient(): Promise<void> {
  let serverOptions;
  try {
    serverOptions = serverOptionsFor(settings.launchSettings());
  } catch (err) {
    statusBar.setState("error", message(err));
    void vscode.window.showErrorMessage(`dllm-lsp: ${message(err)}`);
    return;
  }
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
    // A function, so that every start (the client restarts a server that closed the connection)
    // reads the settings as they are then, not as they were when this client was made.
    initializationOptions: () => ({ ...settings.serverOptions(), ...settings.authOption() }),
    outputChannelName: "dllm-lsp",
    stdioOptions: { stdout: pipeServerStdout, stderr: pipeServerStderr },
    middleware: {
      provideInlineCompletionItems: streaming.middleware,
      // The "Fill N holes" code action runs dllm.fillHoles through here: say what came of it.
      executeCommand: async (command, args, next) => {
        const result = await next(command, args);
        if (command === "dllm.fillHoles") reportFill(result as FillResult);
        return result;
      },
      workspace: {
        // The server pulls its settings (workspace/configuration, section "dllm"): answered with
        // the server options only, as they are pushed. The default answer was the whole section,
        // the server's token and launch settings included, which the token's contract
        // (settings.authOption: initializationOptions only) rules out.
        configuration: async (params, token, next) => {
          const answers = await next(params, token);
          if (!Array.isArray(answers)) return answers; // an error: passed on as it is
          return params.items.map((item, i) => (item.section === "dllm" ? settings.serverOptions() : answers[i]));
        },
      },
    },
  };
  const mine = new LanguageClient("dllm", "dllm-lsp", serverOptions, clientOptions);
  client = mine;
  mine.onDidChangeState((e) => {
    if (client !== mine) return; // a client being replaced says nothing about the current one
    if (e.newState === State.Running) {
      statusBar.setState("running");
      void followLoad(); // after an automatic restart too (the tooltip kept "loaded: false")
    } else if (e.newState === State.Stopped) statusBar.setState("stopped");
    else statusBar.setState("starting");
  });
  statusBar.setState("starting");
  try {
    await mine.start();
  } catch (err) {
    if (client !== mine) return;
    statusBar.setState("error", message(err));
    void vscode.window.showErrorMessage(`dllm-lsp failed to start: ${message(err)}`);
    return;
  }
  if (client !== mine) return;
  streaming.noteCapabilities(mine.initializeResult?.capabilities.experimental);
  // What the settings name, until the server's answer (followLoad asks at least once more).
  statusBar.setServerStatus({ model: settings.serverOptions().model, device: settings.serverOptions().device });
  void followLoad();
}

let restarting: Promise<void> = Promise.resolve();
let restartQueued = false;

/** One restart at a time: restarts asked for while one runs (a settings file saved twice, the
 *  restart command pressed twice) become one more, which reads the settings as they are then.
 *  Overlapping restarts each started a client: an extra server ran on, its command registration
 *  failed the next start, and its state events told the status bar "stopped". */
function restartClient(): Promise<void> {
  if (restartQueued) return restarting;
  restartQueued = true;
  const run = async (): Promise<void> => {
    restartQueued = false;
    streaming.reset();
    nextEdits.dismiss();
    const old = client;
    client = undefined;
    await old?.stop().catch(() => undefined);
    statusSupported = true;
    await startClient();
  };
  restarting = restarting.then(run, run); // after a restart that failed, too
  return restarting;
}

/** Asks the server for `dllm/status` (model, device, last latency); quiet when it lacks the method. */
async function refreshStatus(): Promise<ServerStatus | undefined> {
  if (!client?.isRunning() || !statusSupported) return undefined;
  try {
    const status = await client.sendRequest<ServerStatus>("dllm/status", null);
    if (status) statusBar.setServerStatus(status);
    return status;
  } catch (err) {
    if (isMethodNotFound(err)) statusSupported = false;
    return undefined;
  }
}

/** How often `dllm/status` is asked again until the server's model has loaded, and for how long
 *  at most (a large checkpoint read from a slow disk; the server itself waits 300 s for a load). */
const LOAD_POLL_MS = 1000;
const LOAD_FOLLOW_MS = 15 * 60 * 1000;
let following: LanguageClient | undefined;

/** Refreshes the status bar until the model has loaded or failed to: asked once, the status was
 *  taken while the server still loaded (or had not begun: it first asks for the settings), and the
 *  tooltip said "loaded: false", or named the model it was replacing, until the next completion
 *  (after every start, restart and change of dllm.model). */
async function followLoad(): Promise<void> {
  const mine = client;
  if (!mine || following === mine) return;
  following = mine;
  const until = Date.now() + LOAD_FOLLOW_MS;
  try {
    while (client === mine && Date.now() < until) {
      const status = await refreshStatus();
      if (!status || status.error || (status.loaded && !status.loading)) return;
      await new Promise((resolve) => setTimeout(resolve, LOAD_POLL_MS));
    }
  } finally {
    if (following === mine) following = undefined;
  }
}

/** Runs the server's `dllm.fillHoles` command on the selection (or the scope around the cursor). */
async function fillHolesInSelection(): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (!editor) return;
  if (!client?.isRunning()) {
    void vscode.window.showWarningMessage("dllm-lsp: the server is not running (dllm: Restart the language server).");
    return;
  }
  const commands = client.initializeResult?.capabilities.executeCommandProvider?.commands ?? [];
  if (!commands.includes("dllm.fillHoles")) {
    void vscode.window.showInformationMessage("dllm-lsp: this server does not offer hole filling (dllm.fillHoles).");
    return;
  }
  const result = await client.sendRequest(ExecuteCommandRequest.type, {
    command: "dllm.fillHoles",
    arguments: [
      client.code2ProtocolConverter.asUri(editor.document.uri),
      client.code2ProtocolConverter.asRange(editor.selection),
    ],
  });
  reportFill(result as FillResult);
}

interface FillResult {
  applied?: boolean;
  reason?: string;
  sites?: { label?: string; reason?: string; source?: string }[];
}

/** Tells the user when the server filled nothing, with its reasons (e.g. "the filled text does not parse"). */
function reportFill(result: FillResult | null | undefined): void {
  if (!result) return;
  const sites = result.sites ?? [];
  if (result.applied) {
    const filled = sites.filter((s) => !s.reason).length;
    vscode.window.setStatusBarMessage(`dllm-lsp: filled ${filled} hole${filled === 1 ? "" : "s"}`, 5000);
    return;
  }
  const reasons = sites.filter((s) => s.reason).map((s) => `${s.label ?? "hole"}: ${s.reason}`);
  if (result.reason) reasons.unshift(result.reason);
  void vscode.window.showInformationMessage(
    `dllm-lsp: no hole filled${reasons.length ? ` (${reasons.join("; ")})` : ""}`,
  );
}

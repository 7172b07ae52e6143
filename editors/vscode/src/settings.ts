// Reads the extension's settings: how to reach the server, and the options the server understands
// (docs/protocol.md, "Options"). Only those options are sent to the server, under `dllm`.
import * as vscode from "vscode";

export interface LaunchSettings {
  command: string[];
  pythonPath: string;
  tcp: string;
}

// --- generated from dllm_lsp/options.py by `python -m dllm_lsp.options --write`
/** The server options of docs/protocol.md; names are the server's. */
export interface ServerOptionsPayload {
  maxSpanTokens: number;
  maxLineTokens: number;
  contextTokens: number;
  companionEdits: boolean;
  healWhitespace: boolean;
  healTyped: boolean;
  holeMarker: string;
  languages: Record<string, boolean>;
  steps: number;
  threshold: number;
  confidence: "prob" | "margin" | "entropy";
  remaskBelow: number | null;
  slotStartTokens: number | null;
  endsBalanced: boolean;
  minConfidence: number | null;
  alternatives: number;
  temperature: number;
  model: string;
  device: string;
  cache: "dual" | "reuse" | "none";
  cacheRefreshEvery: number;
  streamIntervalMs: number;
}

const SERVER_KEYS: (keyof ServerOptionsPayload)[] = [
  "maxSpanTokens",
  "maxLineTokens",
  "contextTokens",
  "companionEdits",
  "healWhitespace",
  "healTyped",
  "holeMarker",
  "languages",
  "steps",
  "threshold",
  "confidence",
  "remaskBelow",
  "slotStartTokens",
  "endsBalanced",
  "minConfidence",
  "alternatives",
  "temperature",
  "model",
  "device",
  "cache",
  "cacheRefreshEvery",
  "streamIntervalMs",
];
// --- end of the generated part

function section(): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration("dllm");
}

/** How to reach the server; throws a message naming a malformed setting (a command given as one
 *  string was split into characters: "args.push is not a function"). */
export function launchSettings(): LaunchSettings {
  const cfg = section();
  const command = cfg.get<unknown>("server.command", []);
  if (!Array.isArray(command) || !command.every((part) => typeof part === "string")) {
    throw new Error(
      `dllm.server.command must be an array of strings, e.g. ["dllm-lsp", "serve", "--stdio"], not ${JSON.stringify(command)}`,
    );
  }
  return {
    command: command as string[],
    pythonPath: cfg.get<string>("server.pythonPath", ""),
    tcp: cfg.get<string>("server.tcp", ""),
  };
}

export function serverOptions(): ServerOptionsPayload {
  const cfg = section();
  const out: Record<string, unknown> = {};
  for (const key of SERVER_KEYS) {
    const value = cfg.get(key);
    if (value !== undefined) out[key] = value;
  }
  return out as unknown as ServerOptionsPayload;
}

/** The token of a `dllm-lsp serve --tcp` server that requires one (docs/deploy.md): sent in
 *  initializationOptions.token only, never with the other options on a configuration change. */
export function authOption(): { token?: string } {
  const token = section().get<string>("server.token", "").trim();
  return token ? { token } : {};
}

export function completionsEnabled(): boolean {
  return section().get<boolean>("enabled", true);
}

export function streamingEnabled(): boolean {
  return section().get<boolean>("streaming", true);
}

/** Writes `dllm.enabled` where it is decided: the most specific scope that sets it (a value written
 *  to the user settings under a workspace that sets its own changed nothing), else the user's. */
export async function setCompletionsEnabled(on: boolean): Promise<void> {
  const found = section().inspect<boolean>("enabled");
  const target =
    found?.workspaceFolderValue !== undefined
      ? vscode.ConfigurationTarget.WorkspaceFolder
      : found?.workspaceValue !== undefined
        ? vscode.ConfigurationTarget.Workspace
        : vscode.ConfigurationTarget.Global;
  await section().update("enabled", on, target);
}

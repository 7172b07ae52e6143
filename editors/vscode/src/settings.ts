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

export function launchSettings(): LaunchSettings {
  const cfg = section();
  return {
    command: cfg.get<string[]>("server.command", []),
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

export async function setCompletionsEnabled(on: boolean): Promise<void> {
  await section().update("enabled", on, vscode.ConfigurationTarget.Global);
}

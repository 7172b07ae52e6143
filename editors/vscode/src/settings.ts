// Reads the extension's settings: how to reach the server, and the options the server understands
// (docs/protocol.md, "Options"). Only those options are sent to the server, under `dllm`.
import * as vscode from "vscode";

export interface LaunchSettings {
  command: string[];
  pythonPath: string;
  tcp: string;
}

/** The server options of docs/protocol.md; names are the server's. */
export interface ServerOptionsPayload {
  model: string;
  device: string;
  steps: number;
  threshold: number;
  maxSpanTokens: number;
  maxLineTokens: number;
  contextTokens: number;
  streamIntervalMs: number;
  languages: Record<string, boolean>;
}

const SERVER_KEYS: (keyof ServerOptionsPayload)[] = [
  "model",
  "device",
  "steps",
  "threshold",
  "maxSpanTokens",
  "maxLineTokens",
  "contextTokens",
  "streamIntervalMs",
  "languages",
];

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

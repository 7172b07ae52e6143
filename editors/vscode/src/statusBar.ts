// The status-bar item: model, device, last latency; a click turns completions on or off.
import * as vscode from "vscode";

export interface ServerStatus {
  model?: string;
  family?: string;
  device?: string;
  loaded?: boolean;
  loading?: boolean;
  error?: string | null;
  lastLatencyMs?: number | null;
}

export class DllmStatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private status: ServerStatus = {};
  private latencyMs?: number;
  private state: "starting" | "running" | "stopped" | "error" = "starting";
  private detail = "";
  private pendingEdits = 0;

  constructor(private readonly isEnabled: () => boolean) {
    this.item = vscode.window.createStatusBarItem("dllm.status", vscode.StatusBarAlignment.Right, 100);
    this.item.name = "dllm-lsp";
    this.render();
    this.item.show();
  }

  dispose(): void {
    this.item.dispose();
  }

  setState(state: "starting" | "running" | "stopped" | "error", detail = ""): void {
    this.state = state;
    this.detail = detail;
    this.render();
  }

  setServerStatus(status: ServerStatus): void {
    // A server still loading answers nulls: keep what is known until it has better. Another
    // model (a settings change) starts afresh: the old one's family stayed next to the new name.
    const known = Object.fromEntries(Object.entries(status).filter(([, v]) => v !== null && v !== undefined));
    const kept = known.model !== undefined && known.model !== this.status.model ? {} : this.status;
    this.status = { ...kept, ...known, error: status.error ?? undefined };
    if (typeof status.lastLatencyMs === "number") this.latencyMs = status.lastLatencyMs;
    this.render();
  }

  setLatency(ms: number): void {
    this.latencyMs = ms;
    this.render();
  }

  setPendingEdits(n: number): void {
    this.pendingEdits = n;
    this.render();
  }

  render(): void {
    const on = this.isEnabled();
    // A server that is not running (stopped for good after crashing, or failed to start) looked
    // the same as a running one: the icon and text changed only while starting, and a click
    // toggled completions that could not come. It says so now, and a click restarts it.
    const down = this.state === "stopped" || this.state === "error";
    const parts = ["dllm"];
    if (this.status.model) parts.push(shortModel(this.status.model));
    if (down) parts.push(this.state === "error" ? "server failed" : "server stopped");
    else {
      if (this.status.device) parts.push(this.status.device);
      if (this.latencyMs !== undefined) parts.push(`${Math.round(this.latencyMs)} ms`);
      if (this.pendingEdits > 0) parts.push(`${this.pendingEdits} next edit${this.pendingEdits > 1 ? "s" : ""}`);
    }
    let icon = on ? "$(sparkle)" : "$(circle-slash)";
    if (this.state === "starting") icon = "$(loading~spin)";
    if (this.state === "stopped") icon = "$(debug-disconnect)";
    if (this.state === "error" || this.status.error) icon = "$(error)";
    this.item.text = `${icon} ${parts.join(" · ")}${on || down ? "" : " (off)"}`;
    this.item.command = down ? "dllm.restartServer" : "dllm.toggle";
    this.item.backgroundColor = down
      ? new vscode.ThemeColor(this.state === "error" ? "statusBarItem.errorBackground" : "statusBarItem.warningBackground")
      : undefined;
    const lines = [
      down
        ? `dllm-lsp: the server is not running (click to restart it); completions ${on ? "on" : "off"}`
        : `dllm-lsp: completions ${on ? "on" : "off"} (click to toggle)`,
      `server: ${this.state}${this.detail ? ` (${this.detail})` : ""}`,
      `model: ${this.status.model ?? "?"}${this.status.family ? ` (${this.status.family})` : ""}`,
      `device: ${this.status.device ?? "?"}`,
      `loaded: ${this.status.loaded ?? "?"}`,
    ];
    if (this.status.error) lines.push(`error: ${this.status.error}`);
    if (this.latencyMs !== undefined) lines.push(`last completion: ${Math.round(this.latencyMs)} ms`);
    this.item.tooltip = lines.join("\n");
  }
}

/** The last path component of a model folder, or the shipped model's name. */
function shortModel(model: string): string {
  const parts = model.split(/[\\/]/).filter(Boolean);
  return parts.length ? parts[parts.length - 1] : model;
}

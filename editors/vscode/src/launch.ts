// How the language client reaches the server: a child process on stdio, or a TCP connection to a
// server someone already runs (`dllm-lsp serve --tcp HOST:PORT`, e.g. one GPU box for a team).
import * as net from "net";
import { Executable, ServerOptions, StreamInfo } from "vscode-languageclient/node";
import { LaunchSettings } from "./settings";

/** Parses "host:port" (or just "port", meaning 127.0.0.1); throws a message naming the bad value. */
export function parseTcpAddress(spec: string): { host: string; port: number } {
  const match = /^(?:(.+):)?(\d+)$/.exec(spec.trim());
  const port = match ? Number(match[2]) : NaN;
  if (!match || !(port > 0 && port < 65536)) {
    throw new Error(`dllm.server.tcp must look like "127.0.0.1:2087", got "${spec}"`);
  }
  return { host: match[1] || "127.0.0.1", port };
}

export function stdioCommand(settings: LaunchSettings): { command: string; args: string[] } {
  if (settings.command.length > 0) {
    return { command: settings.command[0], args: settings.command.slice(1) };
  }
  if (settings.pythonPath) {
    return { command: settings.pythonPath, args: ["-m", "dllm_lsp", "serve", "--stdio"] };
  }
  return { command: "dllm-lsp", args: ["serve", "--stdio"] };
}

export function serverOptionsFor(settings: LaunchSettings): ServerOptions {
  if (settings.tcp) {
    const { host, port } = parseTcpAddress(settings.tcp);
    return () =>
      new Promise<StreamInfo>((resolve, reject) => {
        const socket = net.connect({ host, port });
        socket.once("connect", () => resolve({ reader: socket, writer: socket }));
        socket.once("error", (err) => reject(new Error(`cannot reach dllm-lsp at ${host}:${port}: ${err.message}`)));
      });
  }
  const { command, args } = stdioCommand(settings);
  // No `transport`: with TransportKind.stdio the client appends `--stdio` to the arguments, which a
  // user's own command (a wrapper script) may refuse; without it the process talks on its stdio all
  // the same, and the default commands above already say `--stdio`.
  const exe: Executable = { command, args };
  return { run: exe, debug: exe };
}

// The server's stderr in the "dllm-lsp" output channel, each line at the level it was logged at.
// vscode-languageclient writes every stderr line as an error, so the server's INFO lines ("loaded
// the model") showed as "[error]", and the channel's level filter could not tell the real errors.
import * as readline from "readline";
import type { Readable } from "stream";
import type { LogOutputChannel } from "vscode";

type Level = "debug" | "info" | "warn" | "error";

// `dllm-lsp serve` logs "%(asctime)s %(levelname)s %(name)s: %(message)s" (dllm_lsp/commands.py).
const RECORD = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) (.*)$/;
const LEVELS: Record<string, Level> = { DEBUG: "debug", INFO: "info", WARNING: "warn", ERROR: "error", CRITICAL: "error" };

/** The level of one stderr line and what to write, given the level of the record before it: a
 *  record's own (its timestamp dropped, the channel writes one); a traceback is an error; any
 *  other line (a record's continuation) goes with the record it follows. */
function classify(line: string, previous: Level): { level: Level; text: string } {
  const record = RECORD.exec(line);
  if (record) return { level: LEVELS[record[1]], text: record[2] };
  if (line.startsWith("Traceback (most recent call last)")) return { level: "error", text: line };
  return { level: previous, text: line };
}

/** `stdioOptions.stderr` of the language client. */
export function pipeServerStderr(input: Readable, channel: LogOutputChannel): void {
  // Before any record, a line is an error: a crash before logging was set up, a wrapper's message.
  let level: Level = "error";
  readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on("line", (line) => {
    const { level: at, text } = classify(line, level);
    level = at;
    channel[at](text);
  });
}

/** `stdioOptions.stdout`, as the client's default: the server's stdout carries the protocol, so
 *  this sees only what a non-stdio transport leaves there. */
export function pipeServerStdout(input: Readable, channel: LogOutputChannel): void {
  readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on("line", (line) =>
    channel.info(line),
  );
}

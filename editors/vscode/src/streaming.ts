// Inline completions that sharpen while the server denoises.
//
// VS Code asks a provider once and shows what it returns; it cannot be pushed updates. So one
// `dllm/inlineCompletion` request (with a partialResultToken) runs per cursor state, its `$/progress`
// reports are kept, and each report re-triggers the inline suggestion: VS Code asks again, and for
// the same document version and position we answer with the newest text instead of a new request.
// When the server lacks the method (MethodNotFound) we fall back to plain textDocument/inlineCompletion.
import * as vscode from "vscode";
import { ProgressType } from "vscode-languageclient";
import { LanguageClient } from "vscode-languageclient/node";
import type * as proto from "vscode-languageclient";

const METHOD_NOT_FOUND = -32601;
const REQUEST_CANCELLED = -32800;
const SERVER_CANCELLED = -32802;

interface StreamReport {
  kind: "report";
  step: number;
  totalSteps: number;
  text: string;
  meanConfidence?: number;
  range?: proto.Range;
}

type InlineResult = proto.InlineCompletionList | proto.InlineCompletionItem[] | null | undefined;

type Next = (
  document: vscode.TextDocument,
  position: vscode.Position,
  context: vscode.InlineCompletionContext,
  token: vscode.CancellationToken,
) => vscode.ProviderResult<vscode.InlineCompletionItem[] | vscode.InlineCompletionList>;

/** One running streamed request, for one (document version, position). */
class Stream {
  latest?: StreamReport;
  final?: InlineResult;
  /** shownKey of what the provider last returned for this stream. */
  shown?: string;
  done = false;
  /** VS Code holds the final answer's items (set once the stream is done). */
  private held = false;
  failed?: unknown;
  readonly cts = new vscode.CancellationTokenSource();
  readonly started = Date.now();
  private waiters: (() => void)[] = [];
  private settleWaiters: (() => void)[] = [];

  constructor(
    readonly key: string,
    readonly uri: string,
    readonly version: number,
    readonly position: vscode.Position,
  ) {}

  changed(): void {
    const waiters = this.waiters;
    this.waiters = [];
    waiters.forEach((w) => w());
    this.wakeIfSettled();
  }

  /** VS Code holds what this stream ended with: it failed (or was cancelled), or it answered and
   *  VS Code has taken the answer's items (no redraw was needed, or the redraw has finished). */
  get settled(): boolean {
    return this.done && (this.failed !== undefined || this.held);
  }

  /** VS Code holds the final answer's items now. */
  noteHeld(): void {
    this.held = true;
    this.wakeIfSettled();
  }

  /** Resolves once `settled`. */
  whenSettled(): Promise<void> {
    if (this.settled) return Promise.resolve();
    return new Promise((resolve) => this.settleWaiters.push(resolve));
  }

  private wakeIfSettled(): void {
    if (!this.settled) return;
    const waiters = this.settleWaiters;
    this.settleWaiters = [];
    waiters.forEach((w) => w());
  }

  /** Resolves at the next report or at the end, or when VS Code gives up on this call. */
  nextChange(token: vscode.CancellationToken): Promise<void> {
    if (this.done) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiters.push(resolve);
      token.onCancellationRequested(() => resolve());
    });
  }
}

export interface CompletionEvents {
  onLatency(ms: number): void;
  onStreamingSupport(supported: boolean): void;
}

let tokenCounter = 0;

export class StreamingInlineCompletions implements vscode.Disposable {
  private current?: Stream;
  /** undefined: not known yet (the first request tells). */
  private supported?: boolean;
  private retriggerPending = false;
  private streamingKey = false;
  // The cursor has left the stream's place: its answer will not be drawn there, so the cycling
  // keys go back to VS Code's own bindings.
  private readonly cursorMoves = vscode.window.onDidChangeTextEditorSelection(() => {
    if (this.current && !atCursor(this.current)) this.setStreaming(false);
  });

  constructor(
    private readonly clientRef: () => LanguageClient | undefined,
    private readonly enabled: () => boolean,
    private readonly streaming: () => boolean,
    private readonly events: CompletionEvents,
  ) {}

  dispose(): void {
    this.reset();
    this.cursorMoves.dispose();
  }

  /** Forgets the running stream (the client restarts); the listeners stay (dispose at a restart
   *  left the `dllm.inlineStreaming` key set for good once the cursor left a stream). */
  reset(): void {
    this.current?.cts.cancel();
    this.current = undefined;
    this.setStreaming(false);
  }

  /** The context key `dllm.inlineStreaming`: a stream for the cursor runs, or its answer is being
   *  drawn. The extension's Alt+] / Alt+[ are bound while it is set as well as while a suggestion is
   *  visible, since each redraw of a report hides the suggestion for a moment (see retrigger), and a
   *  press in that moment would otherwise reach no binding at all. */
  private setStreaming(on: boolean): void {
    if (this.streamingKey === on) return;
    this.streamingKey = on;
    void vscode.commands.executeCommand("setContext", "dllm.inlineStreaming", on);
  }

  /** Called once the server has answered `initialize`. */
  noteCapabilities(experimental: unknown): void {
    const exp = experimental as { dllm?: { inlineCompletionStreaming?: boolean } } | undefined;
    if (exp?.dllm?.inlineCompletionStreaming !== undefined) {
      this.supported = exp.dllm.inlineCompletionStreaming;
      this.events.onStreamingSupport(this.supported);
    }
  }

  /** vscode-languageclient middleware for textDocument/inlineCompletion. */
  readonly middleware = async (
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    token: vscode.CancellationToken,
    next: Next,
  ): Promise<vscode.InlineCompletionItem[] | vscode.InlineCompletionList | null | undefined> => {
    if (!this.enabled()) return null;
    const client = this.clientRef();
    if (!client || this.supported === false || !this.streaming()) {
      const started = Date.now();
      const result = await next(document, position, context, token);
      if (!token.isCancellationRequested) this.events.onLatency(Date.now() - started);
      return result;
    }
    const key = `${document.uri.toString()}@${document.version}:${position.line}:${position.character}`;
    let stream = this.current;
    if (!stream || stream.key !== key) {
      stream?.cts.cancel();
      stream = this.start(client, document, position, context, key);
      this.current = stream;
    }
    if (!stream.done && !stream.latest) await stream.nextChange(token);
    if (stream.failed !== undefined && isMethodNotFound(stream.failed)) {
      return next(document, position, context, token);
    }
    return this.itemsOf(client, stream, position);
  };

  private start(
    client: LanguageClient,
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    key: string,
  ): Stream {
    const stream = new Stream(key, document.uri.toString(), document.version, position);
    this.setStreaming(true);
    void stream.whenSettled().then(() => {
      if (this.current === stream) this.setStreaming(false);
    });
    const partialResultToken = `dllm-inline-${process.pid}-${++tokenCounter}`;
    const progress = client.onProgress(new ProgressType<StreamReport>(), partialResultToken, (value) => {
      if (stream.done || value?.kind !== "report") return;
      stream.latest = value;
      stream.changed();
      this.retrigger(stream);
    });
    const params = {
      ...client.code2ProtocolConverter.asInlineCompletionParams(document, position, context),
      partialResultToken,
    };
    client.sendRequest<InlineResult>("dllm/inlineCompletion", params, stream.cts.token).then(
      (result) => {
        stream.final = result;
        if (this.supported === undefined) {
          this.supported = true;
          this.events.onStreamingSupport(true);
        }
        this.events.onLatency(Date.now() - stream.started);
        // Redraw when the answer differs from the last report drawn: another text, or alternatives
        // besides it (a report carries the first suggestion only; VS Code cycles what it was given).
        const changed = shownKey(true, result, undefined) !== shownKey(false, undefined, stream.latest);
        stream.done = true;
        progress.dispose();
        if (!changed) stream.noteHeld();
        stream.changed();
        if (changed) this.retrigger(stream);
      },
      (err) => {
        stream.failed = err;
        stream.done = true;
        progress.dispose();
        if (isMethodNotFound(err)) {
          this.supported = false;
          this.events.onStreamingSupport(false);
        } else if (!isCancelled(err)) {
          client.warn(`dllm/inlineCompletion failed: ${String((err as Error)?.message ?? err)}`);
        }
        stream.changed();
      },
    );
    return stream;
  }

  /** Resolves once the stream at the active editor's cursor has ended and VS Code holds its final
   *  items (the suggestion and its alternatives); at once when no stream runs there; after `limitMs`
   *  at the latest. Why: VS Code cycles (Alt+] / Alt+[) only among the items it holds. While the
   *  server denoises, that is the latest report's one item, and the explicit fetch a cycle starts is
   *  "already satisfied" by the redraw that drew the report, so a press then would be spent on a list
   *  of one. The extension's Alt+] and Alt+[ wait here first. */
  async settledAtCursor(limitMs: number): Promise<void> {
    const stream = this.current;
    if (!stream || !atCursor(stream)) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([stream.whenSettled(), new Promise<void>((resolve) => (timer = setTimeout(resolve, limitMs)))]);
    clearTimeout(timer);
  }

  /** Asks VS Code to query the provider again, if the cursor is still where the stream started. */
  private retrigger(stream: Stream): void {
    if (this.retriggerPending) return;
    if (this.current !== stream || !atCursor(stream)) return;
    this.retriggerPending = true;
    // An explicit trigger at the same position and version is "already satisfied" for VS Code and
    // fetches nothing; hiding first drops that state, so the provider is asked again.
    void (async () => {
      try {
        await vscode.commands.executeCommand("editor.action.inlineSuggest.hide");
        await vscode.commands.executeCommand("editor.action.inlineSuggest.trigger");
      } finally {
        this.retriggerPending = false;
        // The trigger command returns once VS Code has fetched and taken the provider's items.
        if (stream.done && stream.shown === shownKeyOf(stream)) stream.noteHeld();
        // Reports that came while this ran: show the newest one too.
        if (this.current === stream && stream.shown !== shownKeyOf(stream)) this.retrigger(stream);
      }
    })();
  }

  private async itemsOf(
    client: LanguageClient,
    stream: Stream,
    position: vscode.Position,
  ): Promise<vscode.InlineCompletionItem[] | vscode.InlineCompletionList | null | undefined> {
    stream.shown = shownKeyOf(stream);
    if (stream.done) {
      if (stream.final === undefined || stream.final === null) return null;
      return client.protocol2CodeConverter.asInlineCompletionResult(stream.final);
    }
    const report = stream.latest;
    if (!report || !report.text) return null;
    const range = report.range ? client.protocol2CodeConverter.asRange(report.range) : new vscode.Range(position, position);
    return [new vscode.InlineCompletionItem(report.text, range)];
  }
}

/** Whether the active editor's document and cursor are still those the stream started at. */
function atCursor(stream: Stream): boolean {
  const editor = vscode.window.activeTextEditor;
  return (
    editor !== undefined &&
    editor.document.uri.toString() === stream.uri &&
    editor.document.version === stream.version &&
    editor.selection.active.isEqual(stream.position)
  );
}

/** What the provider gives VS Code for this stream now, as one string to compare: the texts of
 *  the final answer's items (the suggestion and its alternatives), or the latest report's text. */
function shownKeyOf(stream: { done: boolean; final?: InlineResult; latest?: StreamReport }): string | undefined {
  return shownKey(stream.done, stream.final, stream.latest);
}

function shownKey(done: boolean, final: InlineResult, latest: StreamReport | undefined): string | undefined {
  if (!done) return latest?.text === undefined ? undefined : JSON.stringify([latest.text]);
  if (!final) return undefined;
  const items = Array.isArray(final) ? final : final.items;
  return JSON.stringify(items.map((item) => (typeof item.insertText === "string" ? item.insertText : item.insertText.value)));
}

function errorCode(err: unknown): number | undefined {
  return (err as { code?: number } | undefined)?.code;
}

export function isMethodNotFound(err: unknown): boolean {
  return errorCode(err) === METHOD_NOT_FOUND;
}

function isCancelled(err: unknown): boolean {
  const code = errorCode(err);
  return code === REQUEST_CANCELLED || code === SERVER_CANCELLED;
}

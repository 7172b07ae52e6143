// Next-edit suggestions: after the user changed one site, `dllm/nextEdits` proposes edits at the
// related sites. They are previewed as decorations (old text struck through, new text after it);
// the user accepts all, accepts the one nearest the cursor, or dismisses them.
import * as vscode from "vscode";
import { LanguageClient } from "vscode-languageclient/node";
import type * as proto from "vscode-languageclient";
import { isMethodNotFound } from "./streaming";

interface ProtoNextEdit {
  range: proto.Range;
  newText: string;
  label?: string;
}

interface PendingEdit {
  range: vscode.Range;
  newText: string;
  label: string;
}

export class NextEdits implements vscode.Disposable {
  private readonly oldText = vscode.window.createTextEditorDecorationType({
    backgroundColor: new vscode.ThemeColor("diffEditor.removedTextBackground"),
    textDecoration: "line-through",
  });
  private readonly newText = vscode.window.createTextEditorDecorationType({
    after: { color: new vscode.ThemeColor("editorGhostText.foreground"), fontStyle: "italic" },
  });
  private pending: PendingEdit[] = [];
  private uri?: vscode.Uri;
  private version?: number;
  private shownIn?: vscode.TextEditor;
  private unsupported = false;
  private applying = false;
  private readonly subscriptions: vscode.Disposable[] = [];

  constructor(
    private readonly clientRef: () => LanguageClient | undefined,
    private readonly onCount: (n: number) => void,
  ) {
    // Any edit the user makes themselves invalidates the preview's ranges.
    this.subscriptions.push(
      vscode.workspace.onDidChangeTextDocument((e) => {
        if (
          !this.applying &&
          this.uri &&
          e.document.uri.toString() === this.uri.toString() &&
          e.document.version !== this.version
        ) {
          this.dismiss();
        }
      }),
    );
  }

  dispose(): void {
    this.dismiss();
    this.oldText.dispose();
    this.newText.dispose();
    this.subscriptions.forEach((d) => d.dispose());
  }

  async suggest(editor: vscode.TextEditor | undefined = vscode.window.activeTextEditor): Promise<number> {
    const client = this.clientRef();
    if (!editor) return 0;
    if (!client?.isRunning()) {
      void vscode.window.showWarningMessage("dllm-lsp: the server is not running (dllm: Restart the language server).");
      return 0;
    }
    if (this.unsupported) {
      void vscode.window.showInformationMessage("dllm-lsp: this server does not offer next edits (dllm/nextEdits).");
      return 0;
    }
    const params = {
      textDocument: { uri: client.code2ProtocolConverter.asUri(editor.document.uri) },
      position: client.code2ProtocolConverter.asPosition(editor.selection.active),
    };
    // The answer's ranges are those of the version asked about: an edit made while the server
    // worked (a line typed above) would put them on other text, and "accept all" corrupted the file.
    const asked = editor.document.version;
    let result: { edits?: ProtoNextEdit[] } | null;
    try {
      result = await client.sendRequest<{ edits?: ProtoNextEdit[] } | null>("dllm/nextEdits", params);
    } catch (err) {
      if (isMethodNotFound(err)) {
        this.unsupported = true;
        void vscode.window.showInformationMessage("dllm-lsp: this server does not offer next edits (dllm/nextEdits).");
        return 0;
      }
      void vscode.window.showWarningMessage(`dllm-lsp: next edits failed: ${err instanceof Error ? err.message : String(err)}`);
      return 0;
    }
    if (editor.document.version !== asked) {
      void vscode.window.setStatusBarMessage("dllm-lsp: the document changed meanwhile; ask for next edits again", 4000);
      return 0;
    }
    this.dismiss();
    const edits = result?.edits ?? [];
    this.pending = edits.map((e) => ({
      range: client.protocol2CodeConverter.asRange(e.range),
      newText: e.newText,
      label: e.label ?? "",
    }));
    this.uri = editor.document.uri;
    this.version = editor.document.version;
    this.shownIn = editor;
    this.render(editor);
    if (!this.pending.length) void vscode.window.setStatusBarMessage("dllm-lsp: no next edits", 3000);
    return this.pending.length;
  }

  async acceptAll(): Promise<void> {
    const editor = this.editor();
    if (!editor || !this.pending.length) return;
    const edit = new vscode.WorkspaceEdit();
    for (const e of this.pending) edit.replace(editor.document.uri, e.range, e.newText);
    this.clearState(editor);
    await vscode.workspace.applyEdit(edit);
  }

  async acceptOne(): Promise<void> {
    const editor = this.editor();
    if (!editor || !this.pending.length) return;
    const cursor = editor.selection.active;
    let best = 0;
    for (let i = 1; i < this.pending.length; i++) {
      if (distance(this.pending[i].range, cursor) < distance(this.pending[best].range, cursor)) best = i;
    }
    const chosen = this.pending[best];
    const rest = this.pending.filter((_, i) => i !== best).map((e) => ({ ...e, range: shiftRange(e.range, chosen) }));
    const edit = new vscode.WorkspaceEdit();
    edit.replace(editor.document.uri, chosen.range, chosen.newText);
    // Our own edit must not count as the user's (which dismisses the preview).
    this.applying = true;
    let applied = false;
    try {
      applied = await vscode.workspace.applyEdit(edit);
    } finally {
      this.applying = false;
    }
    if (!applied) return;
    this.pending = rest;
    this.version = editor.document.version;
    if (rest.length) this.render(editor);
    else this.clearState(editor);
  }

  dismiss(): void {
    const editor = this.editor();
    if (editor) this.clearState(editor);
    this.pending = [];
    this.uri = undefined;
    this.onCount(0);
    void vscode.commands.executeCommand("setContext", "dllm.nextEditsVisible", false);
  }

  /** The editor the preview is drawn in (of a document split in two, the first visible one was
   *  taken: accepting cleared the other half and left the preview drawn for good). */
  private editor(): vscode.TextEditor | undefined {
    if (!this.uri) return undefined;
    if (this.shownIn && vscode.window.visibleTextEditors.includes(this.shownIn)) return this.shownIn;
    return vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === this.uri!.toString());
  }

  private clearState(editor: vscode.TextEditor): void {
    for (const shown of new Set([editor, ...(this.shownIn ? [this.shownIn] : [])])) {
      shown.setDecorations(this.oldText, []);
      shown.setDecorations(this.newText, []);
    }
    this.shownIn = undefined;
    this.pending = [];
    this.uri = undefined;
    this.onCount(0);
    void vscode.commands.executeCommand("setContext", "dllm.nextEditsVisible", false);
  }

  private render(editor: vscode.TextEditor): void {
    editor.setDecorations(
      this.oldText,
      this.pending.map((e) => ({ range: e.range, hoverMessage: e.label ? `dllm next edit: ${e.label}` : undefined })),
    );
    editor.setDecorations(
      this.newText,
      this.pending.map((e) => ({
        range: new vscode.Range(e.range.end, e.range.end),
        renderOptions: { after: { contentText: ` → ${e.newText.replace(/\n/g, "⏎")}` } },
      })),
    );
    this.onCount(this.pending.length);
    void vscode.commands.executeCommand("setContext", "dllm.nextEditsVisible", this.pending.length > 0);
  }
}

function distance(range: vscode.Range, pos: vscode.Position): number {
  if (range.contains(pos)) return 0;
  const anchor = pos.isBefore(range.start) ? range.start : range.end;
  return Math.abs(anchor.line - pos.line) * 1_000 + Math.abs(anchor.character - pos.character);
}

/** Where `range` ends up after `applied` replaced its range with its text (ranges do not overlap). */
export function shiftRange(range: vscode.Range, applied: PendingEdit): vscode.Range {
  const a = applied.range;
  if (range.end.isBeforeOrEqual(a.start)) return range;
  const newLines = applied.newText.split(/\r\n|\r|\n/);
  const lineDelta = newLines.length - 1 - (a.end.line - a.start.line);
  const endChar =
    newLines.length === 1 ? a.start.character + newLines[0].length : newLines[newLines.length - 1].length;
  const move = (p: vscode.Position): vscode.Position =>
    p.line === a.end.line ? new vscode.Position(p.line + lineDelta, endChar + (p.character - a.end.character)) : p.translate(lineDelta);
  return new vscode.Range(move(range.start), move(range.end));
}

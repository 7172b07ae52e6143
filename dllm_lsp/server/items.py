"""A Completion as LSP items: inline completion items and classic completion items.

Ranges are computed on the completion's own snapshot (the text it was planned and finished on),
with the client's position encoding, so they describe the version the request was made for.
"""
from __future__ import annotations

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from dllm_lsp.multisite.companion import APPLY_COMMAND
from dllm_lsp.pipeline import Completion

from .positions import range_in_text


def inline_list(uri: str, completion: Completion | None, codec: PositionCodec) -> types.InlineCompletionList:
    """The completion, then its alternatives (same range), as the items a client cycles through."""
    if completion is None:
        return types.InlineCompletionList(items=[])
    text = completion.snapshot.text
    at = range_in_text(text, completion.start, completion.end, codec)
    items = [types.InlineCompletionItem(insert_text=found.text, range=at)
             for found in (completion, *completion.alternatives)]
    if completion.companion is not None:   # multi-site: accepting the first item adds the import
        statement = completion.companion.statement
        items[0].command = types.Command(title=f"Add {statement}", command=APPLY_COMMAND, arguments=[uri, statement])
    return types.InlineCompletionList(items=items)


def item_label(text: str) -> str:
    """One line for the completion menu: the first line with text, `…` when more follows (a
    completion that starts on a new line was labelled with all of its lines)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "↵" if "\n" in text or "\r" in text else text
    return lines[0] + (" …" if len(lines) > 1 else "")


def completion_list(completion: Completion | None, codec: PositionCodec) -> types.CompletionList:
    # Incomplete: the next keystroke asks again, since the completion depends on every character.
    if completion is None:
        return types.CompletionList(is_incomplete=True, items=[])
    text = completion.snapshot.text
    at = range_in_text(text, completion.start, completion.end, codec)
    items = []
    for rank, found in enumerate((completion, *completion.alternatives)):
        items.append(types.CompletionItem(
            label=item_label(found.text),
            kind=types.CompletionItemKind.Snippet if "\n" in found.text else types.CompletionItemKind.Text,
            detail=f"dllm · {completion.result.steps} steps · {completion.result.latency_ms:.0f} ms"
                   + ("" if rank == 0 else " · alternative"),
            text_edit=types.TextEdit(range=at, new_text=found.text),
            filter_text=completion.typed_prefix or None,
            sort_text=str(rank),
            insert_text_format=types.InsertTextFormat.PlainText,
        ))
    if completion.companion is not None:   # multi-site: the import the first completion needs
        place = range_in_text(text, completion.companion.offset, completion.companion.offset, codec)
        items[0].additional_text_edits = [types.TextEdit(range=place, new_text=completion.companion.text)]
    return types.CompletionList(is_incomplete=True, items=items)

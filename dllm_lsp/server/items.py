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
    if completion is None:
        return types.InlineCompletionList(items=[])
    text = completion.snapshot.text
    item = types.InlineCompletionItem(insert_text=completion.text,
                                      range=range_in_text(text, completion.start, completion.end, codec))
    if completion.companion is not None:   # multi-site: accepting the item adds the import
        statement = completion.companion.statement
        item.command = types.Command(title=f"Add {statement}", command=APPLY_COMMAND, arguments=[uri, statement])
    return types.InlineCompletionList(items=[item])


def completion_list(completion: Completion | None, codec: PositionCodec) -> types.CompletionList:
    # Incomplete: the next keystroke asks again, since the completion depends on every character.
    if completion is None:
        return types.CompletionList(is_incomplete=True, items=[])
    text, found = completion.snapshot.text, completion.text
    first_line = found.splitlines()[0] if found else ""
    item = types.CompletionItem(
        label=first_line.strip() or found.strip(),
        kind=types.CompletionItemKind.Snippet if "\n" in found else types.CompletionItemKind.Text,
        detail=f"dllm · {completion.result.steps} steps · {completion.result.latency_ms:.0f} ms",
        text_edit=types.TextEdit(range=range_in_text(text, completion.start, completion.end, codec), new_text=found),
        filter_text=completion.typed_prefix or None,
        sort_text="0",
        insert_text_format=types.InsertTextFormat.PlainText,
    )
    if completion.companion is not None:   # multi-site: the import the completion needs
        at = range_in_text(text, completion.companion.offset, completion.companion.offset, codec)
        item.additional_text_edits = [types.TextEdit(range=at, new_text=completion.companion.text)]
    return types.CompletionList(is_incomplete=True, items=[item])

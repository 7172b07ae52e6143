"""Typed-through reuse is checked as a fresh completion would be (docs/serving.md): a suggestion
the user types through is post-processed again on the version typed, and shown only when it
passes there; else the model runs (`typedThroughRefused`).

A probe saw it in Lua with the shipped model: at `retur‸` the suggestion
`return .core.mark.mark.parametrize(` kept the file's one error (it was let through), and at
`return‸`, where the file parses, the same text was reused and shown, adding an error."""
from __future__ import annotations

import asyncio
import random
import sysconfig
from pathlib import Path

import pytest
from lsprotocol import types

from dllm_lsp.bench.typing import plain
from dllm_lsp.engine.types import InfillResult
from dllm_lsp.options import Options
from dllm_lsp.pipeline import plan
from dllm_lsp.server.completions import CompletionService
from dllm_lsp.server.documents import DocumentTrees, LspWorkspace, tree_ready
from dllm_lsp.server.model_host import ModelHost
from dllm_lsp.syntax.document import SYNC_PARSE_BYTES
from dllm_lsp.syntax.snapshot import Snapshot, parse_errors

from .held_parse import assert_still_waiting, parse_held
from .lsp_harness import inline_params, open_doc, start_server, stop_server, wait_loaded

pytestmark = pytest.mark.timeout(300)

# The probe's Lua file (tabs, non-ASCII), Enter typed at its end and then `retur`
LUA = ('local Queue = {}\nQueue.__index = Queue\n\nfunction Queue.new()\n'
       '\treturn setmetatable({ first = 1, last = 0, items = {} }, Queue)\nend\n\n'
       'function Queue:push(v)\nend\n\nfunction Queue:pop()\n\tif self.first > self.last then\n\tend\n'
       '\tlocal v = self.items[self.first]\n\tself.first = self.first + 1\n\treturn v\nend\n\n'
       'local q = Queue.new()\nprint("größe 🐍", q:pop())\n\n')
TYPED = "retur"


async def status(client) -> dict:
    return plain(await client.protocol.send_request_async("dllm/status", {}))


def shown_on(text: str, answer) -> str | None:
    """The text with the answer's first item applied (one-line items: columns are characters here)."""
    if answer is None or not answer.items:
        return None
    item = answer.items[0]
    lines = text.split("\n")
    r = item.range
    assert r.start.line == r.end.line == len(lines) - 1, r
    start = len(text) - len(lines[-1]) + r.start.character
    return text[:start] + item.insert_text + text[len(text) - len(lines[-1]) + r.end.character:]


async def test_a_suggestion_typed_through_is_checked_again_on_the_version_typed(tmp_path):
    client, _, _ = await start_server(tmp_path, {"device": "cpu"})      # the shipped model
    uri = "file:///typed/queue.lua"
    line = LUA.count("\n")
    try:
        assert (await wait_loaded(client))["loaded"]
        open_doc(client, uri, LUA + TYPED, "lua")
        first = await client.text_document_inline_completion_async(inline_params(uri, line, len(TYPED)))
        assert first is not None and first.items, "the shipped model no longer suggests anything at `retur`"
        suggestion = first.items[0].insert_text
        # what made this case: the suggestion goes on with `n`, leaves the error `retur` has, and
        # adds one to `return`, which parses
        assert suggestion.startswith("return") and len(suggestion) > len("return"), suggestion
        assert parse_errors("lua", LUA + "return") == 0
        assert parse_errors("lua", LUA + suggestion) > 0, suggestion
        before = await status(client)
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(line, len(TYPED)), types.Position(line, len(TYPED))), text="n")]))
        again = await client.text_document_inline_completion_async(inline_params(uri, line, len(TYPED) + 1))
        after = await status(client)
    finally:
        await stop_server(client)
    now = LUA + "return"
    shown = shown_on(now, again)
    assert shown is None or parse_errors("lua", shown) <= parse_errors("lua", now), (suggestion, shown)
    assert after["typedThroughHits"] == before["typedThroughHits"], (before, after)
    assert after["typedThroughRefused"] == before["typedThroughRefused"] + 1, (before, after)
    assert after["batching"]["requestSteps"] > before["batching"]["requestSteps"]     # the model ran instead


async def test_in_a_big_document_the_check_runs_off_the_loop_and_refuses_the_same():
    """The same case in a Lua file over SYNC_PARSE_BYTES, at the service, the suggestion made by
    post-processing from the probe's model text: the check reads the tree of the version typed in
    a thread (the loop goes on while its parse is held) and refuses the reuse there too. Real
    documents and trees; the parse is held by its lock, as tests/server/test_companion_moves.py does."""
    pad = "".join(f"function f{n}(x)\n\treturn x * {n}\nend\n\n" for n in range(2500))
    text = pad + LUA + TYPED
    assert len(text.encode()) > SYNC_PARSE_BYTES
    trees, workspace = DocumentTrees(), LspWorkspace(None)
    uri = "file:///typed/big.lua"
    workspace.put_text_document(types.TextDocumentItem(uri=uri, language_id="lua", version=1, text=text))
    assert trees.open(uri, "lua", text) is None
    asked_on = trees.get(uri, workspace)[0]
    await tree_ready(asked_on)
    shown = plan(asked_on, len(text), Options()).finish(
        InfillResult([["return .core.mark.mark.parametrize("]], steps=1, tokens_committed=1, latency_ms=0.0))
    assert shown is not None and shown.text == "return .core.mark.mark.parametrize(", shown
    service = CompletionService(ModelHost(), trees)
    service._shown[uri] = shown
    at = types.Position(line=text.count("\n"), character=len(TYPED))
    change = types.TextDocumentContentChangePartial(range=types.Range(start=at, end=at), text="n")
    with parse_held(trees, uri):
        workspace.update_text_document(types.VersionedTextDocumentIdentifier(uri=uri, version=2), change)
        assert trees.change(uri, [change], workspace.get_text_document(uri)) is None
        typed = trees.get(uri, workspace)[0]
        checking = asyncio.ensure_future(service._typed_through(uri, typed, len(text) + 1))
        await assert_still_waiting(checking, "the typed-through check")
    assert await checking is None
    assert service.counters["typedThroughRefused"] == 1 and service.counters["typedThroughHits"] == 0


# --- what a fresh completion shows passes the check unchanged --------------------------------------

STDLIB = Path(sysconfig.get_paths()["stdlib"])
REPO = Path(__file__).resolve().parents[2]


def true_continuations(rng: random.Random, text: str, count: int):
    """(offset, the file's own text from there on) at `count` places after a blank or punctuation,
    and at line ends and blank lines (block bodies)."""
    places = [i for i in range(1, len(text)) if text[i - 1] in " (,=:.[\r\n"
              and text[i - 1:i + 1] not in ("\n\n", "\r\r", "\r\n", "\n\r")]
    for offset in rng.sample(places, min(count, len(places))):
        # as a model writes it: LF line breaks
        yield offset, text[offset:offset + rng.choice((8, 40, 200))].replace("\r\n", "\n").replace("\r", "\n")


def lines_rewritten(rng: random.Random, text: str, count: int):
    """(document, offset, model text) with 1-3 lines of `text` taken out after a line's end, the
    model writing them again: block bodies after a header (`:`, `{`), and new lines typed on a
    blank line the editor indented (Enter and its indent)."""
    breaks = [i for i, c in enumerate(text) if c == "\n"]
    for at in rng.sample(range(len(breaks) - 4), min(count, len(breaks) - 4)):
        start, k = breaks[at], rng.choice((1, 2, 3))
        end = breaks[at + k]
        removed = text[start:end]                      # its line breaks included, the last one kept
        if rng.random() < 0.5 or not removed.strip():
            yield text[:start] + text[end:], start, removed
        else:                                          # typed Enter and the indent of the first line removed
            indent = removed[1:len(removed) - len(removed[1:].lstrip(" \t"))]
            yield text[:start] + "\n" + indent + text[end:], start + 1 + len(indent), removed[1 + len(indent):]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("path, language", [(STDLIB / "textwrap.py", "python"), (STDLIB / "json/decoder.py", "python"),
                                            (REPO / "editors/vscode/src/extension.ts", "typescript")],
                         ids=["textwrap", "json-decoder", "typescript"])
def test_a_fresh_completion_passes_its_own_check(path, language, newline):
    """The check a typed-through suggestion gets (Completion.passes_finish) lets through, unchanged,
    what post-processing showed at that place: reuse is refused only where the version typed
    changed the verdict, never because post-processing twice writes another text (line breaks
    of CRLF and lone-CR files, re-indented bodies, trimmed closers)."""
    source = path.read_text(encoding="utf-8")
    text = source.replace("\n", newline)
    snapshot = Snapshot.parse(text, language)
    rng = random.Random(7)
    cases = [(snapshot, offset, rest) for offset, rest in true_continuations(rng, text, 150)]
    cases += [(Snapshot.parse(document.replace("\n", newline), language),
               offset + (document.count("\n", 0, offset) if newline == "\r\n" else 0), rest)
              for document, offset, rest in lines_rewritten(rng, source, 150)]
    shown = {False: 0, True: 0}     # one line, several
    for snapshot, offset, rest in cases:
        completion = plan(snapshot, offset, Options()).finish(
            InfillResult([[rest]], steps=1, tokens_committed=1, latency_ms=0.0))
        if completion is None:
            continue
        shown[newline in completion.text] += 1
        assert completion.passes_finish(), (offset, rest, completion.text)
    assert shown[False] >= 10 and shown[True] >= 5, shown

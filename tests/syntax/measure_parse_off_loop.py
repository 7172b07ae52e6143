"""Script observations behind docs/architecture.md "Big documents" (not a test: timings are not
asserted). Run from the repository: `python tests/syntax/measure_parse_off_loop.py [--out FILE]`
(default docs/results/big-documents-cpu.json: the figures with the machine and versions).

1. Whether a thread parsing a 1.3 M-character Python file lets the main thread run: the main
   thread counts 1 ms sleeps while the other parses a byte string, then the same text through a
   read callback (syntax/snapshot.py, READ_CHUNK_BYTES).
2. What didOpen / didChange leave on the thread that calls them (the event loop), before (a parse
   there) and now (DocumentTrees: the parse goes to a worker thread).
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

from lsprotocol import types

from dllm_lsp.bench.environment import environment
from dllm_lsp.server import documents
from dllm_lsp.server.documents import DocumentTrees, LspWorkspace
from dllm_lsp.syntax.document import ParsedDocument
from dllm_lsp.syntax.snapshot import encode, parse

ROOT = Path(__file__).resolve().parents[2]


def source(size: int = 1_300_000) -> str:
    """The repository's own Python, repeated up to `size` characters, cut at a line end."""
    text = "".join(p.read_text(encoding="utf-8") + "\n" for p in sorted((ROOT / "dllm_lsp").rglob("*.py")))
    while len(text) < size:
        text += text
    text = text[:size]
    return text[:text.rfind("\n") + 1]


def ticks_while(work) -> tuple[int, float]:
    done = threading.Event()
    thread = threading.Thread(target=lambda: (work(), done.set()))
    start = time.perf_counter()
    thread.start()
    ticks = 0
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    return ticks, time.perf_counter() - start


def ms(values: list[float]) -> str:
    return f"best {min(values) * 1000:.1f} ms, median {statistics.median(values) * 1000:.1f} ms"


def figures(values: list[float]) -> dict:
    return {"best_ms": round(min(values) * 1000, 2), "median_ms": round(statistics.median(values) * 1000, 2),
            "runs": len(values)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs/results/big-documents-cpu.json"))
    out = ap.parse_args().out
    results: dict = {"command": "python tests/syntax/measure_parse_off_loop.py", "environment": environment("cpu")}
    text = source()
    results["document_chars"] = len(text)
    data = encode(text)
    parse("python", data)   # warm
    for chunked in (False, True):
        rows = []
        for _ in range(3):
            ticks, wall = ticks_while(lambda: parse("python", data, chunked=chunked))
            rows.append({"parse_ms": round(wall * 1000, 1), "main_thread_ticks": ticks})
            print(f"{'read callback' if chunked else 'byte string'}: parse in a thread {wall * 1000:.0f} ms, "
                  f"main thread ran {ticks} times (1 ms sleeps)")
        results["thread_parse_" + ("read_callback" if chunked else "byte_string")] = rows

    opened = []
    for _ in range(5):
        start = time.perf_counter()
        ParsedDocument(text, "python").tree   # noqa: B018 - what didOpen did on the loop
        opened.append(time.perf_counter() - start)
    print(f"before: didOpen parsed on the loop: {ms(opened)}")
    results["did_open_on_loop_before"] = figures(opened)

    workspace, trees, uri = LspWorkspace(None), DocumentTrees(), "file:///big.py"
    opened = []
    for _ in range(5):
        start = time.perf_counter()
        workspace.put_text_document(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
        trees.open(uri, "python", text)
        opened.append(time.perf_counter() - start)
    print(f"now: didOpen's work on the loop: {ms(opened)}")
    results["did_open_on_loop_now"] = figures(opened)
    trees.get(uri, workspace)[0].tree   # noqa: B018 - parsed

    line = text.count("\n", 0, len(text) // 2)
    for label, in_worker in (("before (reparse on the loop)", False), ("now (reparse in a worker)", True)):
        real = documents.parse_soon
        if not in_worker:
            documents.parse_soon = lambda parsed, opened=None: None
        spent = []
        for _ in range(20):
            document = workspace.get_text_document(uri)
            change = types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(line, 0), types.Position(line, 0)), text="x")
            start = time.perf_counter()
            document.apply_change(change)   # pygls' own edit
            trees.change(uri, [change], document)
            if not in_worker:
                trees.get(uri, workspace)[0].tree   # noqa: B018
            spent.append(time.perf_counter() - start)
            time.sleep(0.15)   # a keystroke every 150 ms
        documents.parse_soon = real
        print(f"{label}: a keystroke's didChange on the loop: {ms(spent)}")
        results["did_change_on_loop_" + ("now" if in_worker else "before")] = figures(spent)
    Path(out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()

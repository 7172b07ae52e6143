"""`dllm-lsp bench typing`'s replay and the server it runs: a suggestion is looked at after the
pause before the next key (when its answer has had time to come back) and accepting it types
its text over its range; every request is counted once; a server's log never blocks it; a
server that stops, or stops answering, is one error line; --plot and --file are checked first."""
import asyncio
import concurrent.futures
import json
import os
import random
import stat
import sys

import pytest
from lsprotocol import types

from dllm_lsp.bench import typing as typing_bench
from dllm_lsp.bench.typing import Pace, Script, Segment, Typist, make_script, server_status

TARGET = "def f(a, b):\n    total = a + b\n    return total\n"


class Cancelled(Exception):
    code = typing_bench.CANCELLED


class FakeServer:
    """A client's connection to a server that suggests the rest of the file's line when the
    cursor is inside a word (its range from the word's start: the partial word typed again),
    after `delay` seconds; a cancel before then answers -32800. It keeps the document by the
    edits it is sent."""

    def __init__(self, document: str, delay: float) -> None:
        self.text = document
        self.delay = delay
        self.open: dict[str, concurrent.futures.Future] = {}
        self.edits: list[tuple[types.Range, str]] = []
        self.protocol = self

    def offset(self, pos: types.Position) -> int:
        lines = self.text.split("\n")
        return sum(len(line) + 1 for line in lines[:pos.line]) + pos.character

    def text_document_did_change(self, params: types.DidChangeTextDocumentParams) -> None:
        for change in params.content_changes:
            start, end = self.offset(change.range.start), self.offset(change.range.end)
            self.text = self.text[:start] + change.text + self.text[end:]
            self.edits.append((change.range, change.text))

    def send_request(self, method, params, msg_id=None):
        fut: concurrent.futures.Future = concurrent.futures.Future()
        pos = params.position
        at = self.offset(pos)
        word = at
        while word > 0 and (self.text[word - 1].isalnum() or self.text[word - 1] == "_"):
            word -= 1
        items = []
        if word < at and TARGET.startswith(self.text[:at]):
            rest = TARGET[word:TARGET.index("\n", at)]
            start = types.Position(pos.line, pos.character - (at - word))
            items = [types.InlineCompletionItem(insert_text=rest, range=types.Range(start, pos))]
        answer = types.InlineCompletionList(items=items)
        self.open[msg_id] = fut
        asyncio.get_running_loop().call_later(self.delay, lambda: fut.done() or fut.set_result(answer))
        return fut

    def notify(self, method, params) -> None:
        fut = self.open.get(params.id)
        if method == "$/cancelRequest" and fut is not None and not fut.done():
            fut.set_exception(Cancelled())


def typist_on(delay: float, typo_prob: float = 0.0) -> tuple[Typist, FakeServer]:
    script = Script("file:///t.py", "def f(a, b):\n", [Segment(1, TARGET.split("\n", 1)[1])])
    typist = Typist(0, script, Pace(speed=200, typo_prob=typo_prob, accept_prob=1.0, line_pause_prob=0.0), seed=1)
    typist.client = server = FakeServer(script.document, delay)
    return typist, server


def counted(stats) -> int:
    return stats.answered + stats.superseded + stats.failed + stats.unanswered


def test_a_suggestion_back_before_the_next_key_is_accepted_over_its_range():
    typist, server = typist_on(delay=0.0)
    asyncio.run(typist.run())
    s = typist.stats
    # "    t" then Tab: "total = a + b"; Enter, "    r" then Tab: "return total".
    assert (s.accepted, s.accepted_chars) == (2, len("otal = a + b") + len("return total") - 1)
    assert server.text == TARGET                  # the accepts typed the file's own text
    accepts = [(r, text) for r, text in server.edits if len(text) > 1 and text != "\n"]
    assert [text for _, text in accepts] == ["total = a + b", "return total"]
    # Each over its range: the typed first letter replaced, as an editor accepts an inline item.
    assert all((r.start.character, r.end.character) == (4, 5) for r, _ in accepts)
    # A request after each accept (the editor asks again: what the server's prefetch answers),
    # and every request counted once.
    assert s.keystrokes == len("    t") + 1 + len("\n    r") + 1
    assert counted(s) == s.keystrokes and s.answered == s.keystrokes


def test_slow_answers_are_superseded_and_every_request_counted_once():
    typist, server = typist_on(delay=0.5, typo_prob=0.2)
    asyncio.run(typist.run())
    s = typist.stats
    assert s.accepted == 0 and server.text == TARGET
    assert s.keystrokes > len(TARGET.split("\n", 1)[1].rstrip("\n"))      # the typos and their backspaces
    assert s.superseded == s.keystrokes - 1 and s.answered == 1           # the last one drained
    assert counted(s) == s.keystrokes


def test_a_request_given_up_on_is_not_counted_again_when_it_comes_back():
    typist, server = typist_on(delay=0.3)
    typist.pace.line_pause_prob = 0.0

    async def run():
        typist.insert(1, 0, "\n")
        await typist.type_text(1, 0, "    t")
        await typist.drain(timeout=0.01)               # the last request: counted unanswered
        await asyncio.sleep(0.5)                       # ... then it comes back
    asyncio.run(run())
    s = typist.stats
    assert s.unanswered == 1 and counted(s) == s.keystrokes


def test_the_final_status_request_has_a_timeout():
    class Silent:
        def __init__(self):
            self.protocol = self

        def send_request_async(self, method, params):
            return asyncio.get_running_loop().create_future()      # never answered

    with pytest.raises(TimeoutError, match="did not answer dllm/status within"):
        asyncio.run(server_status(Silent(), timeout=0.05))


def test_a_server_that_does_not_start_says_why(tiny_model_dir, capsys):
    rc = typing_bench.main(["--clients", "1", "--keystrokes", "3", "--model", str(tiny_model_dir), "--device", "cpu",
                            "--serve-variant", "x=--bogus"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and err[-1].startswith("dllm-lsp bench typing: error: the server exited with status 2 "
                                          "before listening: "), err
    assert err[-1].endswith("unrecognized arguments: --bogus")


def test_a_server_that_logs_more_than_a_pipe_holds_is_not_blocked(tiny_model_dir, tmp_path, monkeypatch):
    """The server's log went to a pipe nobody read: past 64 KiB its next line blocked it for
    good. A wrapper that writes 200 KiB to stderr before it starts the server stands for a
    chatty log (DEBUG, INFO with many cancels)."""
    wrapper = tmp_path / "chatty-python"
    wrapper.write_text(f"#!/bin/sh\nhead -c 204800 /dev/zero | tr '\\0' x >&2\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sys, "executable", str(wrapper))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    out = tmp_path / "typing.json"
    rc = typing_bench.main(["--clients", "1", "--keystrokes", "5", "--speed", "20", "--model", str(tiny_model_dir),
                            "--device", "cpu", "--out", str(out)])
    assert rc == 0
    row = json.loads(out.read_text())["variants"]["default"][0]
    assert row["unanswered"] == 0 and counted_row(row) == row["keystrokes"]


def counted_row(row: dict) -> int:
    return row["answered"] + row["superseded"] + row["failed"] + row["unanswered"]


def test_an_unwritable_plot_is_refused_before_the_run(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(SystemExit) as exit_:
        typing_bench.main(["--clients", "1", "--plot", str(a_file / "typing.png")])
    assert exit_.value.code == 2 and "--plot" in capsys.readouterr().err


def test_the_figures_come_out_before_a_plot_that_fails(tmp_path, capsys, monkeypatch):
    async def bench(args, log):
        return {"variants": {}, "settings": {"clients": [1]}}

    def plot(result, png):
        raise OSError("disk full")

    monkeypatch.setattr(typing_bench, "bench", bench)
    monkeypatch.setattr(typing_bench, "plot", plot)
    rc = typing_bench.main(["--clients", "1", "--plot", str(tmp_path / "typing.png")])
    out, err = capsys.readouterr()
    assert rc == 1 and json.loads(out) == {"variants": {}, "settings": {"clients": [1]}}
    assert err == f"dllm-lsp bench typing: error: cannot write --plot {tmp_path / 'typing.png'}: disk full\n"


def test_a_file_with_nothing_to_type_is_refused_in_one_line(tmp_path, capsys):
    flat = tmp_path / "flat.py"
    flat.write_text("x = 1\ny = 2\nz = 3\nw = 4\n")
    assert typing_bench.main(["--file", str(flat), "--clients", "1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dllm-lsp bench typing: error: --file {flat} has nothing to type")


def test_a_file_is_opened_in_its_own_language(tmp_path):
    js = tmp_path / "app.js"
    js.write_text("function f(a) {\n  if (a) {\n    let b = a + 1;\n    b = b * 2;\n    return b;\n  }\n}\n")
    script = make_script(js, 0, random.Random(0), keystrokes=10)
    assert script.language_id == "javascript" and script.segments      # 2-space JavaScript: 4 spaces in
    assert make_script(typing_bench.stdlib_file("textwrap.py"), 0, random.Random(0), 10).language_id == "python"

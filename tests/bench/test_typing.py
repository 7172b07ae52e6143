"""`dllm-lsp bench typing` on a tiny model: the real server over TCP, two clients typing at once,
two server variants side by side; every keystroke accounted for, nothing left unanswered."""
import asyncio
import json
import os
import random
import shutil

import pytest

from lsprotocol import types

from dllm_lsp.bench.typing import Pace, Typist, main, make_script, stdlib_file, variants_of


def test_typing_the_segments_back_restores_the_file():
    path = stdlib_file("textwrap.py")
    script = make_script(path, 0, random.Random(3), keystrokes=300)
    assert len(script.segments) >= 2 and sum(len(s.text) for s in script.segments) >= 300
    lines = script.document.splitlines(keepends=True)
    for seg in script.segments:          # in order, each at its own line, as the typist does
        lines[seg.line:seg.line] = seg.text.splitlines(keepends=True)
    assert "".join(lines) == path.read_text()


def test_an_answer_after_the_next_keystrokes_cancel_is_late_not_answered():
    """The server may answer a request it finished before the cancel arrived; the editor has
    moved on by then and drops it, so it must not count as a keystroke answered in time."""
    script = make_script(stdlib_file("textwrap.py"), 0, random.Random(3), keystrokes=20)
    typist = Typist(0, script, Pace(), seed=1)
    loop = asyncio.new_event_loop()
    try:
        item = types.InlineCompletionList(items=[types.InlineCompletionItem(insert_text="x")])
        for key in (1, 2):
            fut = loop.create_future()
            fut.set_result(item)
            if key == 1:
                typist.cancelled.add(key)     # keystroke 2 cancelled request 1 before it came back
            typist.done(fut, sent=0.0, key=key)
    finally:
        loop.close()
    assert (typist.stats.answered, typist.stats.late, typist.stats.shown) == (1, 1, 1)
    assert len(typist.stats.latencies_ms) == 2       # both answers' latencies count


def test_variants_parse_and_refuse_non_objects():
    assert variants_of([]) == {"default": ({}, [])}
    assert variants_of(['a={"steps": 2}', "b="]) == {"a": ({"steps": 2}, []), "b": ({}, [])}
    assert variants_of([], ["serial=--no-batching --prefix-cache 0"]) == {
        "serial": ({}, ["--no-batching", "--prefix-cache", "0"])}
    for bad in ("a=[1]", "=1", "a={"):
        try:
            variants_of([bad])
        except ValueError:
            continue
        raise AssertionError(bad)


def test_two_clients_two_variants_every_keystroke_answered_or_superseded(tiny_model_dir, tmp_path):
    out, png = tmp_path / "typing.json", tmp_path / "typing.png"
    rc = main(["--clients", "1,2", "--keystrokes", "25", "--speed", "4", "--model", str(tiny_model_dir),
               "--variant", 'two-steps={"steps": 2}', "--serve-variant", "serial=--no-batching --context-pass own",
               "--out", str(out), "--plot", str(png)])
    assert rc == 0
    result = json.loads(out.read_text())
    assert set(result["variants"]) == {"serial", "two-steps"}
    # What each variant was, beside its name: its clients' options and its server's arguments.
    assert result["settings"]["variants"] == {
        "serial": {"options": {}, "serve_args": ["--no-batching", "--context-pass", "own"]},
        "two-steps": {"options": {"steps": 2}, "serve_args": []}}
    assert result["environment"]["dllm_lsp"]["version"]          # and the code that measured
    for rows in result["variants"].values():
        assert [r["clients"] for r in rows] == [1, 2]
        for r in rows:
            assert r["keystrokes"] >= 25 * r["clients"]
            assert r["answered"] + r["late"] + r["superseded"] + r["failed"] + r["unanswered"] == r["keystrokes"]
            assert r["unanswered"] == 0 and r["failed"] == 0
            assert r["answered"] > 0 and r["latency"]["p50_ms"] > 0
            work = r["server_work"]        # the model's time, from the server's own counters
            assert work["sessions"] > 0 and work["context_tokens"] > 0
            assert 0 < work["context_s"] < work["busy_s"] and 0 < work["busy_share"] < 1.5
            assert 0 <= work["reused_share"] < 1 and work["context_free_speedup"] > 1
    batched = result["variants"]["two-steps"][1]["server_batching"]
    assert batched["requestSteps"] > 0 and result["variants"]["serial"][1]["server_batching"] is None
    assert result["environment"]["python"] and png.read_bytes()[:4] == b"\x89PNG"


def test_a_missing_source_file_is_one_clear_line(tmp_path, capsys):
    assert main(["--file", str(tmp_path / "nope.py"), "--clients", "1"]) == 1
    assert "source files not found" in capsys.readouterr().err


def test_typing_through_a_ray_serve_deployment_on_a_loopback_cluster(tiny_model_dir, tmp_path):
    """`--ray-replicas`: the bench starts its own Ray cluster (with its own token), deploys the
    model, and its LSP front and typists go through the replica; every keystroke accounted for."""
    if shutil.which("ray") is None and not os.environ.get("CI"):   # under CI=true a missing Ray fails
        pytest.skip("Ray is not installed (pip install 'dllm-lsp[ray]')")
    out = tmp_path / "typing-ray.json"
    rc = main(["--clients", "1", "--keystrokes", "10", "--speed", "4", "--model", str(tiny_model_dir),
               "--device", "cpu", "--ray-replicas", "1", "--out", str(out)])
    assert rc == 0
    rows = json.loads(out.read_text())["variants"]["ray-1-replica"]
    assert [r["clients"] for r in rows] == [1]
    row = rows[0]
    assert row["unanswered"] == 0 and row["failed"] == 0 and row["answered"] > 0
    # an answer that came after the next keystroke's cancel is late (the editor drops it)
    assert row["answered"] + row["late"] + row["superseded"] == row["keystrokes"]

"""The CLI as a user runs it: real subprocesses, a tiny model folder."""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello.py"


def run(*args: str, stdin: str | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dllm_lsp", *args], input=stdin, capture_output=True, text=True, timeout=timeout
    )


def test_complete_prints_json_at_a_one_based_position(tiny_model_dir):
    proc = run("complete", f"{EXAMPLE}:3:12", "--model", str(tiny_model_dir), "--device", "cpu", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["line"] == 3 and out["col"] == 12 and out["language"] == "python"
    assert out["completion"] and "\n" not in out["completion"]
    assert out["replace_from"] == {"line": 3, "col": 12}
    assert out["steps"] >= 1 and out["latency_ms"] > 0
    plain = run("complete", f"{EXAMPLE}:3:12", "--model", str(tiny_model_dir), "--device", "cpu")
    assert plain.stdout.rstrip("\n") == out["completion"]


def test_infill_jsonl_round_trip_keeps_order_and_survives_bad_lines(tiny_model_dir):
    lines = [
        json.dumps({"id": "a", "prefix": "def f(x):\n    return ", "suffix": "\n"}),
        "this is not json",
        json.dumps({"id": 7, "prefix": "x = ", "suffix": "\n", "max_tokens": 5}),
        json.dumps({"id": "bad", "prefix": 3}),
        json.dumps({"id": "zero", "prefix": "y = ", "suffix": "", "max_tokens": 0}),
        # a lone UTF-16 surrogate, as JSON may carry it: the tokenizer cannot take it, U+FFFD can
        '{"id": "lone", "prefix": "s = \'\\ud800", "suffix": "\'\\n"}',
        json.dumps({"id": "start", "prefix": "def f(x):\n    return", "suffix": "\n", "starts_with": " zqxj"}),
        json.dumps({"id": "two-lines", "prefix": "x = ", "starts_with": "a\nb"}),
    ]
    proc = run("infill", "--model", str(tiny_model_dir), "--device", "cpu", stdin="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [o["id"] for o in out] == ["a", None, 7, "bad", "zero", "lone", "start", "two-lines"]
    assert out[6]["completion"].startswith(" zqxj")       # the random model would never write it unaided
    assert "starts_with" in out[7]["error"]
    assert "error" not in out[5] and out[5]["steps"] >= 1
    assert set(out[0]) == {"id", "completion", "steps", "latency_ms"} and out[0]["completion"]
    assert "not JSON" in out[1]["error"]
    assert out[2]["steps"] >= 1
    assert "strings" in out[3]["error"] and "max_tokens" in out[4]["error"]


def test_infill_ends_when_its_reader_has_gone(tiny_model_dir):
    """`dllm-lsp infill < lines | head -1`: the reply writer died on the closed pipe and the
    process waited for ever, the model loaded."""
    line = json.dumps({"prefix": "def f(x):\n    return ", "suffix": "\n", "max_tokens": 4}) + "\n"
    proc = subprocess.Popen([sys.executable, "-m", "dllm_lsp", "infill", "--model", str(tiny_model_dir), "--device",
                             "cpu"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdin.write((line * 30).encode())
    proc.stdin.close()
    assert json.loads(proc.stdout.readline())["completion"] is not None
    proc.stdout.close()                                   # `| head -1` read its line and left
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("infill went on waiting after its reader had gone") from None
    err = proc.stderr.read()
    assert b"Traceback" not in err, err.decode()


def test_infill_answers_a_line_that_is_not_utf8_with_its_error(tiny_model_dir):
    """Under a strict stdin encoding the bad byte once raised out of the read loop: no reply at all,
    not even to the good lines before it."""
    good = json.dumps({"id": 1, "prefix": "x = ", "suffix": "\n", "max_tokens": 4}).encode()
    data = good + b"\n" + b'{"id": 2, "prefix": "\xff"}\n' + good.replace(b'"id": 1', b'"id": 3') + b"\n"
    proc = subprocess.run([sys.executable, "-m", "dllm_lsp", "infill", "--model", str(tiny_model_dir), "--device", "cpu"],
                          input=data, capture_output=True, timeout=120, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [o["id"] for o in out] == [1, None, 3] and "line 2 is not UTF-8" in out[1]["error"]
    refused = run("infill", "--max-tokens", "0", "--model", str(tiny_model_dir), stdin="")
    assert refused.returncode == 1 and "--max-tokens must be within 1..1024" in refused.stderr


def test_infill_with_concurrency_shares_steps_and_answers_as_one_at_a_time(tiny_model_dir):
    prefixes = ["def f(x):\n    return ", "import os\npath = os.path.join(", "class A:\n    def g(self):\n        ",
                "values = [", "total = 0\nfor item in items:\n    total += ", "print("]
    lines = [json.dumps({"id": i, "prefix": p, "suffix": "\n", "max_tokens": 6}) for i, p in enumerate(prefixes)]
    lines.insert(3, "not json")
    stdin = "\n".join(lines) + "\n"
    base = ("infill", "--model", str(tiny_model_dir), "--device", "cpu", "--steps", "4")
    serial, shared = run(*base, stdin=stdin), run(*base, "--concurrency", "4", stdin=stdin)
    assert serial.returncode == 0 and shared.returncode == 0, shared.stderr
    want = [{k: v for k, v in json.loads(line).items() if k != "latency_ms"} for line in serial.stdout.splitlines()]
    got = [{k: v for k, v in json.loads(line).items() if k != "latency_ms"} for line in shared.stdout.splitlines()]
    assert got == want and len(got) == 7 and "not JSON" in got[3]["error"]
    summary = shared.stderr.strip().splitlines()[-1]     # "N request steps in M forward passes (...)"
    steps, passes = [int(w) for w in summary.split() if w.isdigit()][:2]
    assert "forward passes" in summary and passes < steps, summary
    refused = run(*base, "--concurrency", "0", stdin=stdin)
    assert refused.returncode == 1 and "--concurrency must be at least 1" in refused.stderr


@pytest.mark.parametrize("concurrency", ["1", "3"])
def test_infill_answers_each_line_while_its_input_stays_open(tiny_model_dir, concurrency):
    """A program that writes a line and waits for its reply before the next (a pipe kept open)
    gets every reply as soon as its line is done, whatever the concurrency."""
    proc = subprocess.Popen([sys.executable, "-m", "dllm_lsp", "infill", "--model", str(tiny_model_dir),
                             "--device", "cpu", "--steps", "2", "--concurrency", concurrency],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for i in range(2):
            proc.stdin.write(json.dumps({"id": i, "prefix": "x = ", "suffix": "\n", "max_tokens": 4}) + "\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready, f"no reply to line {i} while the input stays open"
            assert json.loads(proc.stdout.readline())["id"] == i
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()


@pytest.mark.parametrize(
    "location, message",
    [("nofile.py:1:1", "is not a file"), (f"{EXAMPLE}:0:1", "1-based"), (f"{EXAMPLE}:99:1", "past the end"),
     (f"{EXAMPLE}:1:999", "past the end of line"), (f"{EXAMPLE}", "FILE:LINE:COL")],
)
def test_complete_rejects_bad_locations(tiny_model_dir, location, message):
    proc = run("complete", location, "--model", str(tiny_model_dir), "--device", "cpu")
    assert proc.returncode == 1
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_a_byte_order_mark_is_no_column_of_line_one(tmp_path, tiny_model_dir):
    replies = []
    for name, bom in (("plain.py", b""), ("bom.py", b"\xef\xbb\xbf")):
        (tmp_path / name).write_bytes(bom + b"x = 1\ny = x +\n")
        proc = run("complete", f"{tmp_path / name}:2:8", "--model", str(tiny_model_dir), "--device", "cpu", "--json")
        assert proc.returncode == 0, proc.stderr
        replies.append({k: v for k, v in json.loads(proc.stdout).items() if k not in ("file", "latency_ms")})
    assert replies[0] == replies[1]
    proc = run("complete", f"{tmp_path / 'bom.py'}:1:7", "--model", str(tiny_model_dir), "--device", "cpu")
    assert proc.returncode == 1 and "past the end of line 1 (5 characters)" in proc.stderr


def test_complete_counts_lines_and_columns_as_the_server_does(tmp_path, tiny_model_dir):
    """Lines end at \\r\\n, \\r or \\n (LSP's line ends): a Windows file, or one with old Mac line
    ends, is completed at the same line and column as its \\n twin, never past a line's end."""
    placed = []
    for name, eol in (("lf.py", b"\n"), ("crlf.py", b"\r\n"), ("cr.py", b"\r")):
        path = tmp_path / name
        path.write_bytes(b"x = 1" + eol + b"y = x +" + eol)
        proc = run("complete", f"{path}:2:8", "--model", str(tiny_model_dir), "--device", "cpu", "--json")
        assert proc.returncode == 0, proc.stderr
        reply = json.loads(proc.stdout)
        placed.append((reply["line"], reply["col"], reply["replace_from"], reply["kind"]))
        past = run("complete", f"{path}:1:7", "--model", str(tiny_model_dir), "--device", "cpu")
        assert past.returncode == 1 and "past the end of line 1 (5 characters)" in past.stderr
        beyond = run("complete", f"{path}:4:1", "--model", str(tiny_model_dir), "--device", "cpu")
        assert beyond.returncode == 1 and "(3 lines)" in beyond.stderr
    assert placed[0] == placed[1] == placed[2] == (2, 8, {"line": 2, "col": 8}, placed[0][3])


def test_complete_refuses_binary_files(tmp_path, tiny_model_dir):
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x00\x01\x02binary")
    proc = run("complete", f"{binary}:1:1", "--model", str(tiny_model_dir), "--device", "cpu")
    assert proc.returncode == 1 and "binary" in proc.stderr


def test_missing_model_folder_is_a_clear_error(tmp_path):
    proc = run("complete", f"{EXAMPLE}:3:12", "--model", str(tmp_path / "nope"), "--device", "cpu")
    assert proc.returncode == 1
    assert "does not exist" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args, env, status, message", [
    (["complete", f"{EXAMPLE}:²:1"], {}, 1, "FILE:LINE:COL"),               # a digit int() refuses
    (["serve", "--tcp", ":²"], {}, 1, "HOST:PORT"),
    (["complete", f"{EXAMPLE}:7:21"], {"DLLM_LSP_THREADS": "²"}, 1, "DLLM_LSP_THREADS must be a positive integer"),
    (["bench", "--out", "{file}/x.json"], {}, 2, "is a file"),              # refused before the run, not after
    (["bench", "typing", "--out", "{tmp}"], {}, 2, "is a folder"),
    (["eval", "humaneval-infilling", "--out", "{file}/x.json"], {}, 2, "is a file"),
])
def test_user_errors_are_one_line(tmp_path, tiny_model_dir, args, env, status, message):
    (tmp_path / "file").write_text("")
    args = [a.format(file=tmp_path / "file", tmp=tmp_path) for a in args]
    proc = subprocess.run([sys.executable, "-m", "dllm_lsp", *args, *(["--model", str(tiny_model_dir)]
                                                                     if args[0] == "complete" else [])],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert proc.returncode == status and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_tcp_address_is_validated():
    proc = run("serve", "--tcp", "localhost:notaport")
    assert proc.returncode == 1 and "HOST:PORT" in proc.stderr


def test_bench_measures_growing_slots_beside_full_width_slots(tiny_model_dir, tmp_path):
    out = tmp_path / "latency.json"
    proc = run("bench", "--model", str(tiny_model_dir), "--device", "cpu", "--runs", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    cases = figures["cases"]
    assert set(cases) == {"line_tail", "line_tail_full_width", "line_tail_alternatives_4", "block_body",
                          "block_body_full_width"}
    several = cases["line_tail_alternatives_4"]       # the first suggestion is the greedy one
    assert several["completion"] == cases["line_tail"]["completion"] and several["samples"] == 2
    assert several["p50_vs_one"] == round(several["p50_ms"] / cases["line_tail"]["p50_ms"], 3)
    start = figures["settings"]["slot_start_tokens"]
    assert figures["settings"]["default_slot_start"] == start        # growing is the default
    for name in ("line_tail", "block_body"):
        grown, full = cases[name], cases[f"{name}_full_width"]
        assert full["slot_width_decoded"] == full["span_tokens"]
        assert start <= grown["slot_width_decoded"] <= grown["span_tokens"]
        assert grown["samples"] == full["samples"] == 2
        assert grown["p50_vs_full_width"] == round(grown["p50_ms"] / full["p50_ms"], 3)
    assert "line_tail_full_width" in proc.stdout and "slot 32/32 tokens" in proc.stdout


def test_bench_compares_step_budgets_side_by_side(tiny_model_dir, tmp_path):
    out = tmp_path / "latency.json"
    proc = run("bench", "--model", str(tiny_model_dir), "--device", "cpu", "--runs", "2", "--steps", "4",
               "--also-steps", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    assert (figures["settings"]["steps"], figures["settings"]["also_steps"]) == (4, [2])
    for name in ("line_tail", "block_body"):
        fewer = figures["cases"][f"{name}_steps_2"]
        assert fewer["steps"] <= figures["cases"][name]["steps"]      # a smaller budget: no more passes
        assert fewer["p50_vs_steps"] == round(fewer["p50_ms"] / figures["cases"][name]["p50_ms"], 3)


def test_bench_profile_says_where_a_completions_time_goes(tiny_model_dir, tmp_path):
    out = tmp_path / "latency.json"
    proc = run("bench", "--model", str(tiny_model_dir), "--device", "cpu", "--runs", "1", "--profile",
               "--cuda-graphs", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(out.read_text())
    # --cuda-graphs on a CPU: the graph variant's bookkeeping runs eagerly, and writes the same.
    for name in ("line_tail", "block_body"):
        graphed = figures["cases"][f"{name}_cuda_graphs"]
        assert graphed["same_completion"] and graphed["completion"] == figures["cases"][name]["completion"]
        assert graphed["p50_vs_eager"] == round(graphed["p50_ms"] / figures["cases"][name]["p50_ms"], 3)
    assert set(figures["profile"]) == {"line_tail", "line_tail_cuda_graphs"}
    assert figures["settings"]["cuda_graphs_variant"] and not figures["settings"]["cuda_graphs_default"]
    found = figures["profile"]["line_tail"]
    assert found["steps"] == figures["cases"]["line_tail"]["steps"]
    assert found["wall_ms_per_call"] > 0 and found["ops_per_call"] > 10 and found["host_top"]
    # The project's own Python, by own time: the decode loop's step is among what a completion runs.
    functions = [row["function"] for row in found["python_top"]]
    assert all(f.startswith(("dllm_lsp/", "kernels/")) for f in functions)
    assert "device_busy_share" not in found            # CUDA figures only on CUDA
    assert "line_tail: profiled" in proc.stdout


def test_infill_ends_balanced_with_the_shipped_model():
    """The shipped model ends this line after an opening `\"\"\"` (the docstring it thinks comes
    next); with `--ends-balanced` it may end only once the string it opened is closed. The
    judgement is SpanEnds' own, so a retrained model that closes it unaided fails the first
    assertion, not silently: pick a prompt where the new model ends open (docs/eval.md)."""
    from dllm_lsp.engine.span_ends import SpanEnds
    from dllm_lsp.engine.types import InfillRequest

    prefix, suffix = 'def parse(text):\n    """Split text into words."""\n', "\n"
    line = json.dumps({"id": 1, "prefix": prefix, "suffix": suffix, "max_tokens": 48, "language": "python"})
    base = ("infill", "--device", "cpu", "--steps", "16")
    plain, balanced = run(*base, stdin=line + "\n"), run(*base, "--ends-balanced", stdin=line + "\n")
    assert plain.returncode == 0 and balanced.returncode == 0, balanced.stderr
    judge = SpanEnds.for_request(InfillRequest.single(prefix, suffix, 48, language="python"))
    open_end, closed_end = json.loads(plain.stdout)["completion"], json.loads(balanced.stdout)["completion"]
    assert not judge.allows(0, open_end), open_end
    assert judge.allows(0, closed_end) and closed_end.startswith(open_end.rstrip("\n")), closed_end
    bad = run(*base, stdin=json.dumps({"id": 2, "prefix": "x", "language": 3}) + "\n")
    assert "language must be a string" in json.loads(bad.stdout)["error"]


def test_complete_reports_its_confidence_and_says_when_the_gate_held_a_completion_back():
    where = f"{EXAMPLE}:7:21"                 # the README's place: the shipped model writes `0` there
    shown = run("complete", where, "--device", "cpu", "--json")
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    confidence = out["confidence"]
    assert out["completion"] == "0" and 0 < confidence["least"] <= confidence["mean"] <= 1 and confidence["tokens"] >= 1
    held = run("complete", where, "--device", "cpu", "--min-confidence", "1.0")
    assert held.returncode == 0 and held.stdout == ""
    assert "less sure of '0'" in held.stderr and "minConfidence 1.0" in held.stderr
    low = run("complete", where, "--device", "cpu", "--min-confidence", str(confidence["mean"] / 2))
    assert low.stdout.strip() == "0"
    bad = run("complete", where, "--device", "cpu", "--min-confidence", "2")
    assert bad.returncode != 0 and "minConfidence must be within 0..1" in bad.stderr


def test_complete_json_lists_sampled_alternatives_after_the_greedy_completion(tiny_model_dir):
    where = f"{EXAMPLE}:3:12"
    alone = json.loads(run("complete", where, "--model", str(tiny_model_dir), "--device", "cpu", "--json").stdout)
    proc = run("complete", where, "--model", str(tiny_model_dir), "--device", "cpu", "--json", "--alternatives", "8")
    assert proc.returncode == 0, proc.stderr
    several = json.loads(proc.stdout)
    assert several["completion"] == alone["completion"] and "alternatives" not in alone
    assert several["alternatives"] and several["completion"] not in several["alternatives"]
    assert len(set(several["alternatives"])) == len(several["alternatives"])
    bad = run("complete", where, "--model", str(tiny_model_dir), "--device", "cpu", "--alternatives", "9")
    assert bad.returncode == 1 and "alternatives must be within 1..8" in bad.stderr

"""What a new user meets following README.md and docs/cli.md, and typing wrong things: the real
CLI in a subprocess (its parser read in this process where only the help text is checked).

A mistyped command or bench mode names the likely one; `bench --help` lists its modes; a server
started with a model folder or device that cannot be loaded says so at once, as `complete` does;
a flag's refusal names the flag and the value typed; `bench` says which model it timed."""
from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from dllm_lsp import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello.py"


def run(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dllm_lsp", *args], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout)


def last_line(proc: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args, prog, says", [
    (["complet", "x.py:1:1"], "dllm-lsp", "unknown command 'complet': did you mean 'complete'?"),
    (["serv"], "dllm-lsp", "unknown command 'serv': did you mean 'serve'?"),
    (["Eval"], "dllm-lsp", "did you mean 'eval'?"),
    # taken for the latency benchmark with a stray word ("unrecognized arguments: typng")
    (["bench", "typng"], "dllm-lsp bench", "unknown bench mode 'typng': did you mean 'typing'?"),
    (["bench", "overhed"], "dllm-lsp bench", "did you mean 'overhead'?"),
])
def test_a_mistyped_command_or_bench_mode_names_the_likely_one(args, prog, says):
    proc = run(*args)
    line = last_line(proc)
    assert proc.returncode == 2, proc.stderr       # a usage error, as argparse's own
    assert line.startswith(f"{prog}: error: ") and says in line, line


def test_a_word_like_no_command_lists_them_without_a_guess():
    line = last_line(run("frobnicate"))
    assert "did you mean" not in line
    assert all(name in line for name in ("serve", "complete", "infill", "bench", "eval", "train")), line


def help_of(*words: str, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main([*words, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_bench_help_lists_every_mode(capsys):
    """`dllm-lsp bench --help` showed the latency benchmark's flags and not one of its eight modes;
    the command list named three of them."""
    bench = help_of("bench", capsys=capsys)
    top = " ".join(help_of(capsys=capsys).split())       # argparse wraps the command list
    for mode in cli.BENCH_MODES:
        assert f"\n  {mode} " in bench, (mode, bench)
        assert mode in top, (mode, top)


def test_every_option_of_the_main_commands_says_what_it_does():
    parser = cli.build_parser()
    silent = [f"{name} {action.option_strings or action.dest}"
              for name in ("serve", "complete", "infill", "bench")
              for action in parser.commands[name]._actions if not action.help]
    assert not silent, silent


@pytest.mark.parametrize("args, says", [
    (["--model", "{file}"], "model path {file} is not a folder"),
    (["--model", "{tmp}"], "has no config.json"),
    (["--device", "gpu"], "unknown device 'gpu'"),
])
def test_serve_refuses_a_model_or_device_it_cannot_load_at_once(tmp_path, args, says):
    """Over stdio with the editor gone at once (stdin closed) the server had exited 0: the model is
    loaded when a client first asks, so a misspelt --model or --device was served, every
    completion failing, the reason only in the client's log."""
    (tmp_path / "file").write_text("not a model folder\n")
    args = [a.format(file=tmp_path / "file", tmp=tmp_path) for a in args]
    proc = run("serve", *args, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert last_line(proc).startswith("dllm-lsp: error: ") and says.format(file=tmp_path / "file") in proc.stderr


def test_serve_with_a_good_model_still_serves(tiny_model_dir):
    proc = run("serve", "--model", str(tiny_model_dir), "--device", "cpu", timeout=60)   # stdin closed: done
    assert proc.returncode == 0 and "error" not in proc.stderr, proc.stderr


def test_a_tcp_port_out_of_range_is_named_as_such():
    line = last_line(run("serve", "--tcp", ":0"))
    assert line == "dllm-lsp: error: --tcp port must be within 1..65535, not 0", line


@pytest.mark.parametrize("flag, value, says", [
    ("--min-confidence", "2", "--min-confidence 2.0: minConfidence must be within 0..1"),   # the option's name kept
    ("--alternatives", "0", "--alternatives must be within 1..8, not 0"),
    ("--steps", "0", "--steps must be within 1..256, not 0"),
])
def test_a_refused_flag_is_named_as_typed_with_its_value(tiny_model_dir, flag, value, says):
    """`--min-confidence 2` was refused as "minConfidence must be within 0..1 with prob
    confidences": no flag of that name, and no value."""
    proc = run("complete", f"{EXAMPLE}:3:12", "--model", str(tiny_model_dir), "--device", "cpu", flag, value)
    line = last_line(proc)
    assert proc.returncode == 1 and proc.stdout == ""
    assert line.startswith(f"dllm-lsp: error: {says}"), line


def test_complete_says_whether_the_file_is_missing_or_a_folder(tmp_path, tiny_model_dir):
    model = ("--model", str(tiny_model_dir), "--device", "cpu")
    missing = last_line(run("complete", f"{tmp_path / 'missing.py'}:1:1", *model))
    assert missing.endswith("missing.py is not a file: no such file or directory"), missing
    folder = last_line(run("complete", f"{tmp_path}:1:1", *model))
    assert folder.endswith("is not a file: it is a folder"), folder


def test_bench_table_names_what_it_timed_and_keeps_its_columns(tiny_model_dir):
    proc = run("bench", "--model", str(tiny_model_dir), "--device", "cpu", "--runs", "1", "--steps", "2")
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.strip().splitlines()
    assert header.startswith(f"{tiny_model_dir.name} on cpu, 2 steps, 1 runs a case"), header
    assert len(rows) >= 4 and any(r.startswith("line_tail_alternatives_4 ") for r in rows), rows
    assert len({row.index(" p50 ") for row in rows}) == 1, rows       # one column, the longest name included


def test_infill_from_a_terminal_says_what_it_waits_for(tiny_model_dir):
    """`dllm-lsp infill` typed without `< requests.jsonl` waited on the terminal without a word;
    from a pipe or a file nothing more is printed (the replies' reader may read stderr too)."""

    parent, child = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "dllm_lsp", "infill", "--model", str(tiny_model_dir),
                                 "--device", "cpu"], stdin=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        os.write(parent, b'{"id": 7, "prefix": "x = ", "suffix": "\\n"}\n\x04')    # a line, then Ctrl-D
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(parent)
        os.close(child)
    assert proc.returncode == 0, err
    assert err.startswith("dllm-lsp infill: reading requests from the terminal") and "Ctrl-D" in err, err
    assert json.loads(out)["id"] == 7
    piped = subprocess.run([sys.executable, "-m", "dllm_lsp", "infill", "--model", str(tiny_model_dir), "--device",
                            "cpu"], input='{"id": 8, "prefix": "x = "}\n', capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and piped.stderr == "" and json.loads(piped.stdout)["id"] == 8, piped.stderr

"""The benchmarks' `--out` JSON and `--plot` PNGs are written whole or not at all, and a file that
cannot be written after all is one error line and exit 1, not a traceback and a half-written file.

A full disk is made real with RLIMIT_FSIZE in a child process (its writes past the limit fail with
EFBIG, as a full disk's fail with ENOSPC): it works as root too, where permission bits do not.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys

from dllm_lsp.cli_errors import write_out

OLD = "the last run's figures\n"


def limited_to(max_bytes: int):
    """A child's preexec: no file it writes may grow past `max_bytes`."""
    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG from write(), not death by signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return preexec


def run_child(args: list[str], limit: int | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout,
                          preexec_fn=limited_to(limit) if limit else None)


def test_bench_out_on_a_full_disk_keeps_the_old_file_and_says_so_in_one_line(tmp_path):
    out = tmp_path / "overhead.json"
    out.write_text(OLD)
    done = run_child(["-m", "dllm_lsp.cli", "bench", "overhead", "--requests", "20", "--out", str(out)], limit=200)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"dllm-lsp bench overhead: error: cannot write {out}: File too large"]
    assert out.read_text() == OLD                       # not the first 200 bytes of the new JSON
    assert sorted(p.name for p in tmp_path.iterdir()) == ["overhead.json"]   # no temporary left


def test_bench_out_in_missing_folders_is_written_whole_with_a_plain_files_mode(tmp_path):
    out = tmp_path / "new" / "deeper" / "overhead.json"
    done = run_child(["-m", "dllm_lsp.cli", "bench", "overhead", "--requests", "20", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["settings"]["requests"] == 20
    assert os.listdir(out.parent) == ["overhead.json"]
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask     # not the temporary's 0600


def test_out_through_a_symlink_replaces_the_file_it_names_and_keeps_the_link(tmp_path):
    target = tmp_path / "results" / "figures.json"
    target.parent.mkdir()
    target.write_text(OLD)
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    write_out(link, "{}\n")
    assert link.is_symlink() and link.resolve() == target
    assert target.read_text() == "{}\n"


def test_out_to_a_pipe_writes_through_it_and_leaves_the_pipe(tmp_path):
    """`--out /dev/stdout` and its kind: a rename would have put a file in the stream's place."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)   # a reader first, so the writer's open returns
    try:
        write_out(fifo, '{"p50_ms": 1.0}\n')
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)
        assert os.read(reader, 1000) == b'{"p50_ms": 1.0}\n'
    finally:
        os.close(reader)


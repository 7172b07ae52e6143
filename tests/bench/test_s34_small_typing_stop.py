"""`dllm-lsp bench typing` stopped mid-replay by SIGTERM (the GPU job ends a step with SIGTERM, then
SIGKILL 15 s later) ends its server first and closes its clients without the `shutdown`
handshake: the handshake with a server the same signal had ended waited 10 s per client for an
answer that never came, and one with a server still up kept the connections open as long. A
replay that finishes still shuts its clients down properly.

The real command, its real server over TCP, a tiny model; what the server was asked is read from
its own DEBUG log (pygls logs every request it receives)."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dllm_lsp.lifetime import process_alive

SHUTDOWN = "Request 'shutdown' received"


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def typing_command(model: Path, log: Path, clients: str, keystrokes: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "dllm_lsp", "bench", "typing", "--clients", clients, "--keystrokes", keystrokes,
            "--model", str(model), "--device", "cpu", "--serve-variant", f"logged=--log-file {log} --log-level DEBUG",
            *extra]


@pytest.mark.timeout(300)
def test_sigterm_mid_replay_ends_the_server_first_and_asks_no_handshake(tiny_model_dir, tmp_path):
    log = tmp_path / "server.log"
    bench = subprocess.Popen(typing_command(tiny_model_dir, log, "2", "400"), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        # The replay is under way once the server has been asked for a suggestion (400 keys at a
        # person's pace are minutes of typing from there).
        while "textDocument/inlineCompletion" not in (log.read_text() if log.exists() else ""):
            if bench.poll() is not None:
                pytest.fail(f"the bench ended before its replay: {bench.communicate()[0][-3000:]}")
            time.sleep(0.1)
        servers = children_of(bench.pid)
        assert len(servers) == 1, servers
        os.kill(bench.pid, signal.SIGTERM)          # the bench alone: its server is its to end
        output = bench.communicate(timeout=120)[0]
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
    assert bench.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert not process_alive(servers[0]), "the bench's server outlived it"
    text = log.read_text()
    # It shut each client down first: `shutdown` reached the live server, and each client's end
    # waited on its open connection.
    assert SHUTDOWN not in text, [line for line in text.splitlines() if "shutdown" in line]


@pytest.mark.timeout(300)
def test_a_finished_replay_shuts_its_clients_down(tiny_model_dir, tmp_path):
    log = tmp_path / "server.log"
    done = subprocess.run(typing_command(tiny_model_dir, log, "2", "6", "--speed", "4", "--out",
                                         str(tmp_path / "typing.json")),
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert log.read_text().count(SHUTDOWN) == 2

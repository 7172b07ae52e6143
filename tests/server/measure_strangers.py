"""Script observations behind docs/deploy.md's "a connection without the token" (not a test:
timings are not asserted). Run from the repository:
`python -m tests.server.measure_strangers [--seconds S] [--out FILE]`
(default docs/results/tcp-strangers-cpu.json).

A token-guarded `serve --tcp` on a tiny random model (1 torch thread) and one authenticated
client sending `dllm/status` every 20 ms: its latency with nobody else, then while 4 threads of
strangers connect in a loop, either closing at once (`close`) or sending an `initialize` with a
wrong token and reading the refusal (`wrong`); and how many stranger connections went through a
second."""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.bench.environment import environment
from dllm_lsp.net import free_port

from tests.server.raw_rpc import RawClient, frame

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "measure-token-0123456789abcdef"
STRANGERS = 4


def summary(latencies: list[float]) -> dict:
    latencies = sorted(latencies)
    return {"n": len(latencies), "p50_ms": round(statistics.median(latencies), 2),
            "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))], 2), "max_ms": round(latencies[-1], 2)}


def sample(client: RawClient, seconds: float) -> list[float]:
    latencies = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        assert "result" in client.call("dllm/status", {})
        latencies.append((time.perf_counter() - started) * 1000)
        time.sleep(0.02)
    return latencies


def strangers(port: int, mode: str, seconds: float, client: RawClient) -> dict:
    stop = threading.Event()
    count = [0]
    wrong = frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                   "params": {"capabilities": {}, "initializationOptions": {"token": "wrong"}}})

    def stranger() -> None:
        while not stop.is_set():
            try:
                sock = socket.create_connection(("127.0.0.1", port), 5)
                if mode == "wrong":
                    sock.sendall(wrong)
                    sock.settimeout(5)
                    while sock.recv(65536):
                        pass
                sock.close()
                count[0] += 1
            except OSError:
                time.sleep(0.001)

    threads = [threading.Thread(target=stranger, daemon=True) for _ in range(STRANGERS)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    latencies = sample(client, seconds)
    stop.set()
    elapsed = time.monotonic() - started
    for thread in threads:
        thread.join(10)
    return {"client_status": summary(latencies), "stranger_connections_per_s": round(count[0] / elapsed, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="each phase")
    ap.add_argument("--out", default=str(ROOT / "docs/results/tcp-strangers-cpu.json"))
    args = ap.parse_args()
    results: dict = {"command": "python -m tests.server.measure_strangers", "environment": environment("cpu"),
                     "strangers": STRANGERS, "seconds": args.seconds}
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "tiny"
        write_tiny_model(model)
        port = free_port()
        env = {**os.environ, "DLLM_LSP_TOKEN": TOKEN, "DLLM_LSP_THREADS": "1"}
        server = subprocess.Popen([sys.executable, "-m", "dllm_lsp", "serve", "--tcp", f"127.0.0.1:{port}",
                                   "--model", str(model), "--device", "cpu", "--log-file", str(Path(tmp) / "server.log")],
                                  env=env)
        try:
            for _ in range(300):
                try:
                    socket.create_connection(("127.0.0.1", port), 1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            client = RawClient.tcp(port)
            assert "result" in client.initialize({"token": TOKEN, "steps": 4, "maxLineTokens": 8})
            assert client.wait_loaded()["loaded"]
            client.open("file:///measure/b.py")
            results["alone"] = {"client_status": summary(sample(client, args.seconds / 2))}
            for mode in ("close", "wrong"):
                results[mode] = strangers(port, mode, args.seconds, client)
                print(mode, json.dumps(results[mode]))
        finally:
            server.terminate()
            server.wait(20)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

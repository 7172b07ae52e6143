"""A Ray cluster on this machine (loopback), for the tests and `dllm-lsp bench typing --ray-replicas`.

`ray start --head --block` on a free port, in the foreground of a child process: ending that
child stops exactly the Ray processes it started (never another cluster of the same user). The
child ends with the process that started the cluster, a SIGKILL of it included (an OOM kill of a
benchmark left the raylet, the GCS and the workers running, with their memory and ports): it asks
the kernel for SIGTERM when its parent dies (dllm_lsp/lifetime.py), and `ray start --block` stops
its processes on SIGTERM. Ray's own processes end with `ray start` (Ray's kernel fate sharing).

Token authentication stays on (recent Ray, 2.60 here, turns it on by default, and a cluster on loopback
still runs code for anyone who can reach its port): the cluster gets its own token in its own folder,
and every process started with `self.env` presents it. Nothing is written to ~/.ray, so a token left
there by another cluster neither leaks in nor gets overwritten.
"""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from dllm_lsp.lifetime import PARENT_ENV, child_env, end_with_parent
from dllm_lsp.net import free_port

# Ports Ray's components take by default when not told otherwise: the dashboard agent's HTTP port
# (52365) lies in the range the OS hands out as free ports, and a head whose GCS drew it refused
# to start ("dashboard_agent_http is trying to use a port number 52365 that is used by other
# components"): a test run lost its Ray tests to that once.
RAY_DEFAULT_PORTS = frozenset({6379, 8265, 10001, 52365})
START_TRIES = 3     # a port freed here may be taken by another process before Ray binds it


class RayCluster:
    """Enter it on a thread that outlives the cluster (the main thread): the kernel's signal on the
    parent's death follows the thread that started the child, not the process."""

    def __init__(self, root: Path, cpus: int = 4) -> None:
        self.root, self.cpus = Path(root), cpus
        self._draw_ports()
        self.token_path = self.root / "auth_token"
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0",
                    # Older Ray ignores these; recent Ray needs them on the head and every client.
                    "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path)}
        self.env.pop("RAY_AUTH_TOKEN", None)   # a token in the caller's environment would win over the file
        self.proc: subprocess.Popen | None = None

    def _draw_ports(self) -> None:
        """The GCS port and the dashboard agent's, free now and neither one a Ray default."""
        self.port = free_port(RAY_DEFAULT_PORTS)
        self.agent_port = free_port(RAY_DEFAULT_PORTS | {self.port})
        self.address = f"127.0.0.1:{self.port}"

    def __enter__(self) -> "RayCluster":
        self.root.mkdir(parents=True, exist_ok=True)
        self.token_path.write_text(secrets.token_hex(32))
        self.token_path.chmod(0o600)
        for attempt in range(START_TRIES):
            self.log = open(self.root / "ray-start.log", "w")
            # Through this module's main, which asks to end with this process, then runs `ray`.
            self.proc = subprocess.Popen(
                [sys.executable, "-m", __name__, "ray", "start", "--head", "--block", f"--port={self.port}",
                 f"--num-cpus={self.cpus}", "--num-gpus=0", f"--dashboard-agent-listen-port={self.agent_port}",
                 "--include-dashboard=false", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                 f"--temp-dir={self.root}"],
                env=child_env(self.env), stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                self.wait_ready()
                return self
            except RuntimeError as exc:
                self.log.close()
                if attempt + 1 == START_TRIES or "port" not in str(exc):
                    raise
                self._draw_ports()        # another process took a port between the draw and the bind
        return self

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline, said = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited with {self.proc.returncode}: "
                                   f"{(self.root / 'ray-start.log').read_text()[-2000:]}")
            done = subprocess.run(["ray", "status", f"--address={self.address}"], env=self.env,
                                  capture_output=True, text=True, timeout=60)
            if done.returncode == 0:
                return
            said = (done.stderr or done.stdout)[-1500:]
            time.sleep(1.0)
        # Say why: the last `ray status` answer and the end of `ray start`'s log.
        raise TimeoutError(f"the Ray head at {self.address} did not come up in {timeout:.0f} s; "
                           f"`ray status` said: {said}\n"
                           f"ray start log: {(self.root / 'ray-start.log').read_text()[-1500:]}")

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the cluster (again: nothing)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)   # `ray start --block` stops its own processes
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.log.close()

    def dllm(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dllm_lsp", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)


def main(command: list[str]) -> None:
    """Run `command` (`ray start ...`) in this process, SIGTERMed when the parent process dies.
    The request survives exec; the parent's pid is not passed on to Ray's processes."""
    end_with_parent()
    os.environ.pop(PARENT_ENV, None)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])

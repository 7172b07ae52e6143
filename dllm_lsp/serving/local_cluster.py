"""A Ray cluster on this machine (loopback), for the tests and `dllm-lsp bench typing --ray-replicas`.

`ray start --head --block` on a free port, under a small watcher process (this module's main): ending
that watcher stops exactly the Ray processes it started (never another cluster of the same user).
The cluster ends with the process that started it, a SIGKILL of it included (an OOM kill of a
benchmark left the raylet, the GCS and the workers running, with their memory and ports), and
only then: the watcher checks that the starting process is still its parent and SIGTERMs `ray start`
when it is not, and `ray start --block` stops its processes on SIGTERM. The kernel's signal on the
parent's death (dllm_lsp/lifetime.py) would follow the *thread* that started the watcher: a
cluster started from a thread pool died with that thread. `ray start` itself asks for that signal
on the watcher's death (the watcher has one thread), and Ray's own processes end with `ray start`
(Ray's kernel fate sharing).

Ready means what a client needs: `ray.init` connects and an alive node has the cluster's CPUs. The
GCS answers `ray status` seconds before the raylet registers, and a deployment made in between
failed or waited.

Token authentication stays on (recent Ray, 2.60 here, turns it on by default, and a cluster on loopback
still runs code for anyone who can reach its port): the cluster gets its own token in its own folder,
and every process started with `self.env` presents it. Nothing is written to ~/.ray, so a token left
there by another cluster neither leaks in nor gets overwritten.
"""
from __future__ import annotations

import json
import logging
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
WATCH_S = 0.25      # how often the watcher looks whether the process that started the cluster lives

log = logging.getLogger(__name__)

# Run with the cluster's environment (its token); its last line is a JSON verdict. `ray.init` is a
# client's own way in: it waits (60 s at most) for a raylet of this GCS on this machine.
READY_PROBE = """
import json, sys
import ray
try:
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
except Exception as exc:
    print(json.dumps({"missing": f"a driver connection (ray.init: {exc!r:.1500})"}))
    sys.exit(1)
alive = [node for node in ray.nodes() if node["Alive"]]
cpus = sum(node["Resources"].get("CPU", 0) for node in alive)
if not alive:
    print(json.dumps({"missing": "an alive node in the GCS node table (no raylet registered)"}))
elif cpus < float(sys.argv[2]):
    print(json.dumps({"missing": f"the CPUs: the alive nodes have {cpus:g} of {sys.argv[2]}"}))
else:
    print(json.dumps({"nodes": len(alive), "cpus": cpus}))
"""


class RayCluster:
    """Enter it on any thread: the cluster lives as long as this process (or until `stop`)."""

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
        return self._start()

    def restart(self) -> "RayCluster":
        """Stop the cluster and start a new one at the same address with the same token (a head
        node that came back): its clients reach it as they were configured, with nothing of the old."""
        self.stop()
        return self._start(same_ports=True)

    def _start(self, same_ports: bool = False) -> "RayCluster":
        for attempt in range(START_TRIES):
            self.log = open(self.root / "ray-start.log", "w")
            # Through this module's main, which runs `ray` while this process lives.
            self.proc = subprocess.Popen(
                [sys.executable, "-m", __name__, "ray", "start", "--head", "--block", f"--port={self.port}",
                 f"--num-cpus={self.cpus}", "--num-gpus=0", f"--dashboard-agent-listen-port={self.agent_port}",
                 "--include-dashboard=false", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                 f"--temp-dir={self.root}"],
                env=child_env(self.env), stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                self.wait_ready()
                return self
            except BaseException as exc:
                self.stop()           # a head that never got ready (or a Ctrl-C) takes its processes along
                if (not isinstance(exc, RuntimeError) or attempt + 1 == START_TRIES or "port" not in str(exc)
                        or same_ports):
                    raise
                self._draw_ports()        # another process took a port between the draw and the bind
        return self

    def wait_ready(self, timeout: float = 180.0) -> None:
        """Return once a client can use the cluster: `ray.init` connects and the alive nodes have
        the CPUs asked for (READY_PROBE). Raise RuntimeError if `ray start` exits, TimeoutError
        naming what did not come up after `timeout` seconds."""
        deadline, missing = time.monotonic() + timeout, "a driver connection (ray.init had not returned)"
        probe_log = self.root / "ready-probe.log"
        probe: subprocess.Popen | None = None
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"ray start exited with {self.proc.returncode}: "
                                       f"{(self.root / 'ray-start.log').read_text()[-2000:]}")
                if probe is None:
                    with open(probe_log, "w") as out:
                        probe = subprocess.Popen([sys.executable, "-c", READY_PROBE, self.address, str(self.cpus)],
                                                 env=self.env, stdout=out, stderr=subprocess.STDOUT)
                elif probe.poll() is not None:
                    said = probe_log.read_text()
                    verdict = _last_json(said) or {"missing": f"a probe that answers: {said[-1500:]}"}
                    if probe.returncode == 0 and "missing" not in verdict:
                        return
                    missing, probe = verdict["missing"], None
                    time.sleep(1.0)
                    continue
                time.sleep(0.2)
        finally:
            if probe is not None and probe.poll() is None:
                probe.kill()
                probe.wait()
        raise TimeoutError(f"the Ray head at {self.address} was not ready in {timeout:.0f} s: missing "
                           f"{missing}\nray start log: {(self.root / 'ray-start.log').read_text()[-1500:]}")

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the cluster (again: nothing)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)   # passed on to `ray start --block`, which stops its processes
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.log.close()

    def dllm(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dllm_lsp", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout)


def _last_json(text: str) -> dict | None:
    """The JSON object on the last line of `text` that holds one."""
    for line in reversed(text.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return None


def main(command: list[str]) -> int:
    """Run `command` (`ray start ...`) as this process's child while the process that started this
    one (PARENT_ENV) lives, whichever of its threads did; SIGTERM, SIGHUP or SIGINT here is passed
    on as SIGTERM. Returns the command's exit status. The owner's pid is not passed on to Ray."""
    owner = os.environ.pop(PARENT_ENV, "")
    if not owner.isdecimal():           # started by hand: nothing to watch
        os.execvp(command[0], command)
    # `ray start` ends with this process, even if it is SIGKILLed (this process has one thread).
    env = dict(os.environ)
    os.environ[PARENT_ENV] = str(os.getpid())   # read by end_with_parent in the forked child
    if os.getppid() != int(owner):
        log.warning("the process that started the cluster (%s) has gone: not starting it", owner)
        return 128 + signal.SIGTERM
    child = subprocess.Popen(command, env=env, preexec_fn=end_with_parent)

    def stop(signum, frame) -> None:
        child.send_signal(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, stop)
    while os.getppid() == int(owner):   # reparented (to init or a subreaper) when the owner dies
        try:
            return _status(child.wait(timeout=WATCH_S))
        except subprocess.TimeoutExpired:
            continue
    log.warning("the process that started the cluster (%s) has gone: stopping it", owner)
    child.send_signal(signal.SIGTERM)
    try:
        return _status(child.wait(timeout=60))
    except subprocess.TimeoutExpired:   # nobody is left to stop it otherwise
        os.killpg(os.getpgrp(), signal.SIGKILL)
        raise


def _status(returncode: int) -> int:
    """An exit status for `returncode` (a signal's number as a shell reports it)."""
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

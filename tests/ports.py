"""Waiting for a test's server to listen on a loopback port (drawn with dllm_lsp.net.free_port)."""
from __future__ import annotations

import socket
import subprocess
import time


def listening_addresses(port: int) -> set[str]:
    """Local addresses of LISTEN sockets on `port`, from /proc/net/tcp (hex, little-endian)."""
    found = set()
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_listening(port: int, proc: subprocess.Popen | None = None, timeout: float = 90.0,
                   connect: bool = True) -> None:
    """Return once `port` listens; fail if `proc` (the server, when given) exits first, or after
    `timeout`. With `connect` the probe is a connection to 127.0.0.1 (the server sees one that
    closes at once); without, it reads /proc/net/tcp, on any address, and the server sees nothing."""
    deadline = time.monotonic() + timeout
    while not (accepts(port) if connect else listening_addresses(port)):
        assert proc is None or proc.poll() is None, f"the server exited with {proc.returncode} before listening"
        assert time.monotonic() < deadline, f"nothing listened on port {port} within {timeout:.0f} s"
        time.sleep(0.05)

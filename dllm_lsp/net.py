"""Loopback ports for the processes this project starts for itself (`bench typing`'s servers, a
local Ray cluster's head)."""
from __future__ import annotations

import socket
from collections.abc import Collection


def free_port(avoid: Collection[int] = ()) -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago and is not in `avoid`. Another process
    may take it before the caller binds it: a caller that can retries with a new one."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in avoid:
            return port

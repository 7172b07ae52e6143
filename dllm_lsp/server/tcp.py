"""`dllm-lsp serve --tcp`: many clients over time (and at once), one model.

pygls' own TCP mode serves a single connection and exits the process when it closes (and its
`exit` handler calls sys.exit). Here every connection gets its own language server (documents,
settings, pending requests) while all of them share one ModelHost, so a team shares one GPU.

Each connection is read by the robust frame reader (transport.py). When a token is configured
(auth.py), a connection must present it in `initialize` before anything else is read; when a
connection closes, its queued and running requests are cancelled (a denoise stops at its next
step boundary) so nobody's GPU time goes to a client that has left.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
from typing import Any

from lsprotocol import types
from pygls.protocol.language_server import lsp_method

from dllm_lsp.options import Options

from . import auth
from .app import create_server
from .model_host import ModelHost
from .protocol import DllmProtocol
from .transport import CHUNK, MAX_FRAME_BYTES, Connection, FrameReader

log = logging.getLogger(__name__)

# Before a connection has presented its token, its frames are an initialize (a few kB) and it has
# this long to send one: a stranger announcing 60 MB frames and stalling held hundreds of MB of the
# server's memory for as long as it liked.
PRE_AUTH_MAX_FRAME = 256 * 1024
AUTH_DEADLINE_S = 10.0       # an editor sends initialize at once
# Connections waiting to present their token, at most, in all and from one address: beyond, a
# new one is closed at once. A stranger holding 300 silent sockets (each kept for the deadline)
# exhausted the server's file descriptors, and a client with the token then got no answer; the
# per-address share keeps one such peer from filling the room for everyone else.
MAX_UNAUTHENTICATED = 64
MAX_UNAUTHENTICATED_PER_PEER = 8

# A client whose machine went away without closing (a laptop put to sleep, a network cut) sends
# nothing more, not even a FIN, and an idle editor sends nothing either: its connection, documents,
# edit histories and queued requests stayed for good. The kernel's keepalive probes an idle
# connection after KEEPALIVE_IDLE_S and ends it after KEEPALIVE_PROBES unanswered probes
# KEEPALIVE_INTERVAL_S apart (about two minutes in all), which ends the connection's read like a
# close. A live editor's machine answers the probes itself, so an idle editor is never cut off.
KEEPALIVE_IDLE_S = 60
KEEPALIVE_INTERVAL_S = 15
KEEPALIVE_PROBES = 4


def keep_alive(sock: socket.socket | None) -> None:
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL_S),
                        ("TCP_KEEPCNT", KEEPALIVE_PROBES)):
        if hasattr(socket, name):     # Linux names; elsewhere the system's keepalive times apply
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


class ConnectionProtocol(DllmProtocol):
    """One client's protocol: `exit` ends this connection, not the process; with a token
    configured, nothing but a correct `initialize` is served until it has come."""

    token: str | None = None
    authenticated = False

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any):
        self.close_connection()
        yield from ()

    def close_connection(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self._server._stop_event is not None:
            self._server._stop_event.set()

    frames: FrameReader | None = None

    on_admitted: Any = None     # called once the token has been shown (serve_tcp's count of waiters)

    def handle_message(self, message) -> None:
        if self.token is not None and not self.authenticated:
            if not auth.admit(self, message):
                return
            if self.frames is not None:
                self.frames.max_frame = MAX_FRAME_BYTES
            if self.on_admitted is not None:
                self.on_admitted()
        super().handle_message(message)


class _Discard:
    """The writer of a connection that has gone: answers to its cancelled requests go nowhere."""

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


def close_unauthenticated(server, peer) -> None:
    protocol = server.protocol
    if protocol.token is not None and not protocol.authenticated and not server._stop_event.is_set():
        log.warning("closing the connection from %s: no initialize with its token within %.0f s", peer, AUTH_DEADLINE_S)
        transport = getattr(protocol.writer, "transport", None)
        if transport is not None:
            transport.abort()     # the reader's pending read ends, and with it the connection
        protocol.close_connection()


def cancel_pending(server) -> int:
    """Cancel every request of this connection still queued or running; how many there were."""
    pending = list(server.protocol._request_futures.values())
    server.protocol._request_futures.clear()
    for future in pending:
        future.cancel()
    return len(pending)


async def serve_tcp(host: str, port: int, settings: Options, token: str | None = None,
                    model_host: ModelHost | None = None) -> bool:
    """Serve until cancelled; True when Ctrl-C ended it (the caller then exits at once: a model
    load under way would otherwise hold the process until it finished, a minute for a 7B one)."""
    shared = model_host or ModelHost()
    waiting: dict[int, str] = {}         # connections (by id) that have not shown the token yet -> address
    refused_since_log = [0]

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        if token is not None and (len(waiting) >= MAX_UNAUTHENTICATED or
                                  sum(a == address for a in waiting.values()) >= MAX_UNAUTHENTICATED_PER_PEER):
            refused_since_log[0] += 1
            if refused_since_log[0] in (1, 100) or refused_since_log[0] % 1000 == 0:   # a log that cannot flood
                log.warning("refused %d connection(s) so far: %d are waiting to authenticate (the most held)",
                            refused_since_log[0], len(waiting))
            writer.transport.abort()
            return
        log.info("client connected from %s", peer)
        keep_alive(writer.get_extra_info("socket"))
        server = create_server(settings, host=shared, protocol_cls=ConnectionProtocol)
        server.protocol.token = token
        server._stop_event = threading.Event()
        server.protocol.set_writer(writer)
        frames = FrameReader(lambda: reader.read(CHUNK), max_frame=PRE_AUTH_MAX_FRAME if token else MAX_FRAME_BYTES)
        server.protocol.frames = frames
        if token is not None:
            waiting[id(server)] = address
            server.protocol.on_admitted = lambda: waiting.pop(id(server), None)
        deadline = asyncio.get_running_loop().call_later(AUTH_DEADLINE_S, close_unauthenticated, server, peer)
        try:
            await Connection(server, frames, server._stop_event).run()
        except asyncio.CancelledError:
            # The server is stopping (Ctrl-C). The task ends as if the client had left: Python
            # 3.11's stream callback asks a cancelled task for its exception, and logged the
            # CancelledError that raises, with a traceback, once per connected client.
            pass
        except Exception:
            log.exception("connection from %s failed", peer)
        finally:
            waiting.pop(id(server), None)
            deadline.cancel()
            server.protocol.writer = _Discard()
            cancelled = cancel_pending(server)
            server.host.release()   # its model may be unloaded when another one needs the room
            if server._thread_pool is not None:   # pygls' pool for this connection's thread handlers
                server._thread_pool.shutdown(wait=False, cancel_futures=True)
            if not writer.is_closing():
                writer.close()
            log.info("client %s disconnected%s", peer, f"; cancelled {cancelled} pending request(s)" if cancelled else "")

    listener = await asyncio.start_server(on_connection, host, port, limit=CHUNK)
    log.info("listening on %s%s", ", ".join(str(s.getsockname()) for s in listener.sockets),
             " (a token is required)" if token else "")
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()
    if threading.current_thread() is threading.main_thread():
        # Ctrl-C as an event rather than KeyboardInterrupt: raised inside a connection's callback,
        # it logged a traceback per connected client on its way out.
        loop.add_signal_handler(signal.SIGINT, interrupted.set)
    async with listener:
        serving = asyncio.ensure_future(listener.serve_forever())
        stop = asyncio.ensure_future(interrupted.wait())
        try:
            await asyncio.wait({serving, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            serving.cancel()
            stop.cancel()
    if interrupted.is_set():
        log.info("interrupted: exiting")
    return interrupted.is_set()

"""`dllm-lsp serve --tcp`: many clients over time (and at once), one model.

pygls' own TCP mode serves a single connection and exits the process when it closes (and its
`exit` handler calls sys.exit). Here every connection gets its own language server (documents,
settings, pending requests) while all of them share one ModelHost, so a team shares one GPU.

Each connection is read by the robust frame reader (transport.py), and until it has sent a
well-formed `initialize` it costs the server a socket, a frame reader and (without a token) a
protocol object: its language server (pygls server, options, workspace, thread pool: ~8-20 ms to
build on a 2-core CPU) is built only then, and handed that message. When a token is configured
(auth.py), the first message must be that `initialize` carrying it, checked on the raw JSON
(`screen_first`). Without one, what comes before it is answered as a language server not yet
initialized answers it (`Greeting`), and the connection stays open for its `initialize`. A stranger
connecting in a loop, a port scanner or a pile of idle connections had a language server built for
every connection, which slowed every other client's requests (docs/deploy.md has the figures).
Either way the connections waiting for their `initialize` are few and brief (`WaitingRoom`).
When a connection closes, its queued and running requests are cancelled (a denoise stops at its
next step boundary) so nobody's GPU time goes to a client that has left.

Its `model` and `device` options are limited to what the operator offers (ModelChoices): the
shipped models, `serve --model`, and folders under `serve --allow-model-dir`.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from cattrs import Converter
from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol.language_server import lsp_method

from dllm_lsp import __version__
from dllm_lsp.options import Options

from . import auth
from .app import create_server
from .model_host import ModelChoices, ModelHost
from .params import strict_converter
from .protocol import DllmProtocol
from .transport import (CHUNK, INVALID_REQUEST, MAX_FRAME_BYTES, PARSE_ERROR, Connection, FrameReader, FramingError,
                        decode_body, envelope_error, error_message)

log = logging.getLogger(__name__)

# Before a connection has presented its token, its frames are an initialize (a few kB): a stranger
# announcing 60 MB frames and stalling held hundreds of MB of the server's memory for as long as
# it liked. The same holds before a token-less connection's `initialize` (64 waiting connections
# each sending most of a 64 MiB frame held ~4 GiB for their 10 s): a frame above it is refused
# with -32700 and read past a line at a time, never held, as a too-big frame anywhere is.
PRE_AUTH_MAX_FRAME = 256 * 1024
# How long a connection has to send its `initialize` (with a token: one carrying it), token or
# not. A client opens the connection to send it: an editor does so at once, and a slow machine
# starting its client, or a tunnel's round trips, take seconds, not tens of them. Without a token
# the peers are this machine's processes, but a longer wait would not serve a real client better,
# only keep a port scanner's or a leaking client's sockets in the room every client goes through.
AUTH_DEADLINE_S = 10.0
# Connections waiting for their `initialize`, at most, in all and (with a token) from one address:
# beyond, a new one is closed at once. A stranger holding 300 silent sockets (each kept for the
# deadline) exhausted the server's file descriptors, and a client with the token then got no
# answer; the per-address share keeps one such peer from filling the room for everyone else.
# Without a token there is no share: the server listens on loopback only (auth.check_bind), where
# every peer is this machine and, through a tunnel, every client the same address, so a share
# would only shrink the room to 8 for everyone.
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

    def handle_message(self, message) -> None:
        # The first message passed screen_first already; admit checks the structured one again
        # (a malformed initialize that pygls cannot read is refused here) and strips its token.
        if self.token is not None and not self.authenticated:
            if not auth.admit(self, message):
                return
            if self.frames is not None:
                self.frames.max_frame = MAX_FRAME_BYTES
        super().handle_message(message)


class Greeting(ConnectionProtocol):
    """A token-less connection until its `initialize`. What comes before it is answered as the
    language server not yet initialized answers it, by the same code (DllmProtocol: a request gets
    ServerNotInitialized, or InvalidParams for params that cannot be read; a notification is
    dropped; `exit` closes the connection; Connection: bad frames, batches and malformed
    messages), and the first well-formed `initialize` is kept for the language server built then.
    It runs on a bare pygls server and a converter shared by every connection (Greeter)."""

    def __init__(self, gate: LanguageServer, converter: Converter, writer: asyncio.StreamWriter) -> None:
        super().__init__(gate, converter)
        self.set_writer(writer)
        self.done = threading.Event()          # its Connection stops reading at initialize or exit
        self.initialize: dict | None = None    # the raw message, read again by the language server

    def structure_message(self, data: dict[str, Any]):
        message = super().structure_message(data)
        if isinstance(message, types.InitializeRequest):   # its params could be read
            self.initialize = data
        return message

    def handle_message(self, message) -> None:
        if self.initialize is not None:
            self.done.set()
            return
        super().handle_message(message)

    def close_connection(self) -> None:
        self.writer.close()
        self.done.set()


class Greeter:
    """What every token-less connection's Greeting shares: a pygls server that is never
    initialized and the converter (~6 ms of a language server's build, alone)."""

    def __init__(self) -> None:
        self.converter = strict_converter()
        self.gate = LanguageServer("dllm-lsp", __version__, protocol_cls=DllmProtocol,
                                   converter_factory=lambda: self.converter)

    async def greet(self, frames: FrameReader, writer: asyncio.StreamWriter) -> dict | None:
        """Read the connection until its first well-formed `initialize` and return it (the frames
        after it stay in `frames`), or None when it ended or sent `exit` first."""
        greeting = Greeting(self.gate, self.converter, writer)
        await Connection(greeting, frames, greeting.done).run()
        if greeting.initialize is not None:
            frames.max_frame = MAX_FRAME_BYTES      # initialized: a document may be big now
        return greeting.initialize


class _Discard:
    """The writer of a connection that has gone: answers to its cancelled requests go nowhere."""

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass


class Tally:
    """How often something happened that a peer can make happen as often as it likes: logged the
    1st, 100th and every 1000th time, never a line each (a log that cannot flood). `message` gets
    the count, then the arguments of the time that is logged."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.count = 0

    def add(self, *args: Any) -> None:
        self.count += 1
        if self.count in (1, 100) or self.count % 1000 == 0:
            log.warning(self.message, self.count, *args)


class WaitingRoom:
    """The connections that have not sent their `initialize` yet (with a token: one carrying it),
    with or without a token: at most MAX_UNAUTHENTICATED of them (with a token, and
    MAX_UNAUTHENTICATED_PER_PEER from one address), and each closed when it has not sent it within
    AUTH_DEADLINE_S. A connection past the limits is closed at once, without an answer: it has sent
    nothing yet. (The limits are read per connection.)"""

    def __init__(self, token: bool) -> None:
        self.per_address = token
        self.addresses: dict[object, str] = {}     # a waiting connection -> its address
        self.awaited = "initialize with its token" if token else "initialize"
        self.refused = Tally("refused %d connection(s) so far: %d are waiting for their initialize (the most held)")
        self.late = Tally("closed %d connection(s) so far that sent no %s within %.0f s (the last from %s)")

    def admits(self, address: str) -> bool:
        if len(self.addresses) < MAX_UNAUTHENTICATED and not (
                self.per_address and sum(a == address for a in self.addresses.values()) >= MAX_UNAUTHENTICATED_PER_PEER):
            return True
        self.refused.add(len(self.addresses))
        return False

    @contextlib.contextmanager
    def waiting(self, writer: asyncio.StreamWriter, peer, address: str) -> Iterator[None]:
        """Hold the connection's place while the block reads its `initialize`."""
        me = object()
        self.addresses[me] = address
        deadline = asyncio.get_running_loop().call_later(AUTH_DEADLINE_S, self.close_late, writer, peer, AUTH_DEADLINE_S)
        try:
            yield
        finally:
            deadline.cancel()
            del self.addresses[me]

    def close_late(self, writer: asyncio.StreamWriter, peer, deadline_s: float) -> None:
        self.late.add(self.awaited, deadline_s, peer)
        writer.transport.abort()     # the reader's pending read ends, and with it the connection


def send_frame(writer: asyncio.StreamWriter, message: Any) -> None:
    """One JSON-RPC message to a connection that has no language server (yet)."""
    body = json.dumps(message).encode("utf-8")
    writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)


async def screen_first(frames: FrameReader, writer: asyncio.StreamWriter, token: str) -> dict | None:
    """Read a connection's first message and check it for the token, before any language server
    exists for it: the message (an `initialize` carrying the token) to hand to the server, or
    None when the connection is to be closed (it has been answered as a language server would
    have answered it: docs/deploy.md's table)."""
    item = await frames.next()
    if item is None:
        return None      # gone, or closed at the deadline
    if isinstance(item, FramingError):
        log.warning("refused a connection: a bad frame before initialize (%s)", item.reason)
        send_frame(writer, error_message(None, PARSE_ERROR, f"Parse error: {item.reason}"))
        return None
    try:
        data = decode_body(item)
    except ValueError as exc:
        reason = "body is not valid UTF-8" if isinstance(exc, UnicodeDecodeError) else "body is not valid JSON"
        log.warning("refused a connection: a bad frame before initialize (%s)", reason)
        send_frame(writer, error_message(None, PARSE_ERROR, f"Parse error: {reason}: {exc}"))
        return None
    if not isinstance(data, dict):
        log.warning("refused a connection: %s before initialize", "a batch" if isinstance(data, list) else "a non-object")
        send_frame(writer, error_message(None, INVALID_REQUEST, "Invalid Request: a message must be a JSON object "
                                                                "(batches are not supported by this language server)"))
        return None
    problem = envelope_error(data)
    if problem is not None:
        log.warning("refused a connection: an invalid message before initialize (%s)", problem["error"]["message"])
        send_frame(writer, problem)
        return None
    admitted, answer = auth.screen(data, token)
    if answer is not None:
        send_frame(writer, answer)
    return data if admitted else None


def cancel_pending(server) -> int:
    """Cancel every request of this connection still queued or running, and its settings pulls;
    how many requests there were. The first pull's wait (app.settle) starts the model load at
    its end, and the connection's end ended that wait: the load started for the client that had
    gone, as its user for good (with one model seat, every later client was refused its own
    model). pygls does not hold these tasks among the requests, so they are cancelled here."""
    for task in (server.settling, *server.pulls):
        if task is not None:
            task.cancel()
    pending = list(server.protocol._request_futures.values())
    server.protocol._request_futures.clear()
    for future in pending:
        future.cancel()
    return len(pending)


async def serve_tcp(host: str, port: int, settings: Options, token: str | None = None,
                    model_host: ModelHost | None = None,
                    allowed_model_dirs: Iterable[str | os.PathLike] = ()) -> bool:
    """Serve until cancelled; True when Ctrl-C ended it (the caller then exits at once: a model
    load under way would otherwise hold the process until it finished, a minute for a 7B one).
    `allowed_model_dirs`: folders under which clients may name model folders (ModelChoices)."""
    shared = model_host or ModelHost()
    choices = ModelChoices.of(settings.model.model, settings.model.device, allowed_model_dirs)
    room = WaitingRoom(token is not None)
    greeter = Greeter()

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        if not room.admits(address):
            writer.transport.abort()
            return
        keep_alive(writer.get_extra_info("socket"))
        frames = FrameReader(lambda: reader.read(CHUNK), max_frame=PRE_AUTH_MAX_FRAME)
        server = None
        try:
            with room.waiting(writer, peer, address):
                if token is not None:
                    first = await screen_first(frames, writer, token)
                else:
                    first = await greeter.greet(frames, writer)
            if first is None:
                return
            log.info("client connected from %s", peer)
            server = create_server(settings, host=shared, protocol_cls=ConnectionProtocol)
            server.model_choices = choices
            server.protocol.token = token
            server._stop_event = threading.Event()
            server.protocol.set_writer(writer)
            server.protocol.frames = frames
            connection = Connection(server.protocol, frames, server._stop_event)
            if not connection.message(first):
                connection.refuse_if_unauthenticated("a malformed initialize")
            await connection.run()
        except asyncio.CancelledError:
            # The server is stopping (Ctrl-C). The task ends as if the client had left: Python
            # 3.11's stream callback asks a cancelled task for its exception, and logged the
            # CancelledError that raises, with a traceback, once per connected client.
            pass
        except Exception:
            log.exception("connection from %s failed", peer)
        finally:
            cancelled = 0
            if server is not None:
                server.protocol.writer = _Discard()
                cancelled = cancel_pending(server)
                server.forget_all_documents()   # its documents and trees are freed now, not by the cycle collector
                server.host.release()   # its model may be unloaded when another one needs the room
                if server._thread_pool is not None:   # pygls' pool for this connection's thread handlers
                    server._thread_pool.shutdown(wait=False, cancel_futures=True)
            if not writer.is_closing():
                writer.close()
            if server is not None:
                log.info("client %s disconnected%s", peer,
                         f"; cancelled {cancelled} pending request(s)" if cancelled else "")

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

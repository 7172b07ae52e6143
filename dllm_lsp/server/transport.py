"""Reading LSP frames robustly, for stdio and for each TCP connection.

pygls' own read loop (pygls.io_.run_async) matches only `Content-Length: N\\r\\n` exactly, never
gives up on a bad frame and answers nothing when a body is not a JSON object: one malformed frame
and every later request goes unanswered while the server stays alive. Here:

- header names are case-insensitive and `\\n` line ends are accepted;
- a frame without a usable Content-Length (missing, not a number, negative) or above
  MAX_FRAME_BYTES is refused with one log line and a -32700 error (id null), and the reader
  resynchronises on the next `Content-Length` header, discarding what lies between; a header
  block keeps only its Content-Length (any other header is read and forgotten);
- a body that is not UTF-8 or not JSON gets -32700 (id null), never an "Error in server" popup;
  a body shorter than its Content-Length is split at the next frame's header read into it, or,
  when nothing more comes for BODY_STALL_S and what came is a whole JSON message, served as is;
- a batch (JSON array) and a request with an unusable id (object, array, bool, null) get
  JSON-RPC 2.0 answers (-32600, id null where the id is unusable); a request may omit `params`;
- lone UTF-16 surrogates (`"\\ud800"`) in strings become U+FFFD instead of failing every later
  completion on that document, except in a document's text (didOpen, didChange): the document
  store keeps the client's text and gives the rest of the server U+FFFD (positions.py);
- `exit` ends the process with status 1 unless `shutdown` came first (pygls swallows its own
  SystemExit and always exits 0).

The limits are documented in docs/protocol.md ("Transport limits") and docs/deploy.md.
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pygls.exceptions import JsonRpcInvalidParams

from dllm_lsp.lifetime import process_alive

from .params import describe

log = logging.getLogger(__name__)

MAX_FRAME_BYTES = 64 * 1024 * 1024      # one message; a bigger Content-Length is refused
MAX_HEADER_LINE = 8 * 1024              # longer "lines" between frames are skipped in pieces
CHUNK = 64 * 1024
BODY_STALL_S = 1.0                      # a body that stops this long short of its length is looked at
MAX_UNSENT_BYTES = 16 * 1024 * 1024     # answers waiting for a socket client before its requests wait
UNSENT_WAIT_S = 60.0                    # ... and how long they may wait before the connection is closed

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

_HEADER = re.compile(rb"^([A-Za-z][A-Za-z0-9_-]*)[ \t]*:[ \t]*(.*?)[ \t]*\r?\n$", re.DOTALL)
_CONTENT_LENGTH = b"content-length"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class FramingError:
    """A frame that could not be read; `reason` is logged and sent as a -32700 message."""
    reason: str


class FrameReader:
    """Frames from a byte source: `read()` returns the next chunk, b"" at end of stream."""

    def __init__(self, read: Callable[[], Awaitable[bytes]], max_frame: int = MAX_FRAME_BYTES,
                 stall_s: float = BODY_STALL_S) -> None:
        self._read = read
        self._buf = bytearray()
        self._eof = False
        self._reading: asyncio.Future | None = None   # a read outlives a timeout: its bytes are never lost
        self.max_frame = max_frame
        self.stall_s = stall_s
        self._judged = -1      # the buffer length _complete_json last looked at

    def unread(self, data: bytes) -> None:
        """Put bytes back in front of the stream (the next frame found inside a short body)."""
        self._buf[:0] = data

    async def _fill(self, timeout: float | None = None) -> bool | None:
        """Read one more chunk: True, False at end of stream, None when `timeout` passed first."""
        if self._eof:
            return False
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read())
        done, _ = await asyncio.wait({self._reading}, timeout=timeout)
        if not done:
            return None
        reading, self._reading = self._reading, None
        try:
            chunk = reading.result()
        except (ConnectionError, OSError) as exc:
            log.info("connection read failed: %s", exc)
            chunk = b""
        if not chunk:
            self._eof = True
            return False
        self._buf += chunk
        return True

    async def _line(self) -> bytes | None:
        """The next line (with its newline), a piece of an overlong line, or None at end of stream."""
        start = 0
        while True:
            at = self._buf.find(b"\n", start)
            if at >= 0:
                line = bytes(self._buf[:at + 1])
                del self._buf[:at + 1]
                return line
            if len(self._buf) > MAX_HEADER_LINE:   # keep a tail: a header may start inside it
                keep = 64
                piece = bytes(self._buf[:-keep])
                del self._buf[:-keep]
                return piece
            start = len(self._buf)
            if not await self._fill():
                if self._buf:
                    rest = bytes(self._buf)
                    self._buf.clear()
                    return rest
                return None

    async def _exactly(self, n: int) -> bytes | None:
        waited = False
        while len(self._buf) < n:
            got = await self._fill(timeout=self.stall_s)
            if got is None:
                # Nothing came for a while inside a body: if what came is already a whole JSON
                # message, the Content-Length was too big and the client waits for an answer.
                # (A prefix of a JSON object is never itself valid JSON, so a slow sender is safe.)
                if self._complete_json():
                    body = bytes(self._buf)
                    self._buf.clear()
                    log.warning("frame body stopped %d bytes short of its Content-Length (%d): served the %d "
                                "bytes that came", n - len(body), n, len(body))
                    return body
                if not waited:
                    log.info("waiting for %d more bytes of a %d-byte frame body", n - len(self._buf), n)
                    waited = True
                continue
            if not got:
                return None
        body = bytes(self._buf[:n])
        del self._buf[:n]
        return body

    def _complete_json(self) -> bool:
        # Looked at once per new byte count: a stalled body re-parsed every second (64 MiB of it,
        # on the event loop) stalled every other client.
        if len(self._buf) == self._judged:
            return False
        self._judged = len(self._buf)
        data = bytes(self._buf).strip()
        if not data or data[:1] not in (b"{", b"[") or data[-1:] not in (b"}", b"]"):
            return False
        try:
            json.loads(data)
        except ValueError:
            return False
        return True

    async def next(self) -> bytes | FramingError | None:
        """The next body, a FramingError for a frame that was refused, or None at end of stream."""
        headers: dict[bytes, bytes] | None = None
        resyncing = False   # a header found inside junk: a bad one is junk too, not another error
        skipped = 0
        while True:
            line = await self._line()
            if line is None:
                if headers is not None or skipped:
                    log.warning("stream ended inside a frame header (%d bytes skipped)", skipped)
                return None
            if headers is None:
                if not line.strip():
                    continue   # blank lines between frames
                if not _HEADER.match(line):
                    at = line.lower().find(_CONTENT_LENGTH)
                    if at > 0:   # junk, then a header: read the header as its own line
                        self.unread(line[at:])
                        skipped += at
                    else:
                        skipped += len(line)
                    continue
                headers, resyncing = {}, skipped > 0
                if skipped:
                    log.warning("skipped %d bytes that were not a frame, resynchronised on the next header", skipped)
                    skipped = 0
            if not line.strip():   # end of the header block
                outcome = await self._body(headers)
                if isinstance(outcome, FramingError) and resyncing:
                    log.debug("ignored a bad header found while resynchronising: %s", outcome.reason)
                    headers, skipped = None, 0
                    continue
                return outcome
            match = _HEADER.match(line)
            if match is None:
                at = line.lower().find(_CONTENT_LENGTH)
                if at > 0:
                    self.unread(line[at:])
                if resyncing:
                    headers = None
                    continue
                return FramingError(f"malformed header line {line[:80]!r}; skipping to the next header")
            if match.group(1).lower() == _CONTENT_LENGTH:
                # Only this one is read: a block of endless distinct headers grew the dict (and
                # the memory of the connection) for as long as the block went on.
                headers[_CONTENT_LENGTH] = match.group(2)

    async def _body(self, headers: dict[bytes, bytes]) -> bytes | FramingError | None:
        raw = headers.get(_CONTENT_LENGTH)
        if raw is None:
            return FramingError("frame without a Content-Length header; skipping to the next header")
        if not raw.isdigit():
            return FramingError(f"Content-Length {raw[:40].decode('latin-1')!r} is not a non-negative integer; "
                                "skipping to the next header")
        size = int(raw) if len(raw) <= 20 else self.max_frame + 1
        if size > self.max_frame:
            return FramingError(f"frame of {size} bytes refused: above the limit of {self.max_frame} bytes "
                                "(MAX_FRAME_BYTES); skipping to the next header")
        body = await self._exactly(size)
        if body is None:
            log.warning("stream ended inside a frame body (%d bytes announced)", size)
        return body


# --- Messages -----------------------------------------------------------------------------------

def error_message(msg_id: Any, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def usable_id(data: dict) -> str | int | None:
    msg_id = data.get("id")
    if isinstance(msg_id, str) or (isinstance(msg_id, int) and not isinstance(msg_id, bool)):
        return msg_id
    return None


def envelope_error(data: dict) -> dict | None:
    """The JSON-RPC 2.0 error a malformed message object gets, or None when it is well formed."""
    msg_id = usable_id(data)
    if data.get("jsonrpc") != "2.0":
        return error_message(msg_id, INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    if "method" in data:
        if not isinstance(data["method"], str):
            return error_message(msg_id, INVALID_REQUEST, 'Invalid Request: "method" must be a string')
        if "id" in data and msg_id is None:
            kind = type(data["id"]).__name__ if data["id"] is not None else "null"
            return error_message(None, INVALID_REQUEST,
                                 f'Invalid Request: "id" must be a string or an integer, not {kind}')
        if "params" in data and data["params"] is not None and not isinstance(data["params"], (dict, list)):
            return error_message(msg_id, INVALID_REQUEST, 'Invalid Request: "params" must be an object or an array')
        if data["method"] == "$/cancelRequest":
            target = data.get("params", {}).get("id") if isinstance(data.get("params"), dict) else None
            if isinstance(target, bool) or not isinstance(target, (int, str)):   # pygls hashes it
                return error_message(msg_id, INVALID_PARAMS, "$/cancelRequest: params.id must be a string or an integer")
        return None
    if "id" in data and ("result" in data or "error" in data):
        return None   # a response to one of our requests
    return error_message(msg_id, INVALID_REQUEST, 'Invalid Request: neither a request, a notification nor a response')


def replace_lone_surrogates(value: Any) -> tuple[Any, int]:
    """`value` with every lone UTF-16 surrogate in its strings replaced by U+FFFD, and how many."""
    if isinstance(value, str):
        found = len(_SURROGATE.findall(value))
        return (_SURROGATE.sub("\ufffd", value) if found else value), found
    total = 0
    if isinstance(value, dict):
        for key, item in value.items():
            value[key], n = replace_lone_surrogates(item)
            total += n
    elif isinstance(value, list):
        for index, item in enumerate(value):
            value[index], n = replace_lone_surrogates(item)
            total += n
    return value, total


# A document's text keeps its lone surrogates: the document store counts them as the client does,
# joins a pair an edit makes, and hands the rest of the server U+FFFD for them (positions.py).
# As U+FFFD here, a high and a low surrogate an edit put together counted 6 UTF-8 bytes and 2
# code points where the client had one astral character (4 bytes, 1 code point).
_DOCUMENT_TEXTS = {"textDocument/didOpen": lambda p: [p.get("textDocument")],
                   "textDocument/didChange": lambda p: p.get("contentChanges")}


def replace_lone_surrogates_outside_documents(data: Any) -> tuple[Any, int]:
    """replace_lone_surrogates, except in the document texts of a didOpen or didChange."""
    kept = []
    texts = _DOCUMENT_TEXTS.get(data.get("method")) if isinstance(data, dict) else None
    if texts is not None and isinstance(data.get("params"), dict):
        holders = texts(data["params"])
        for holder in holders if isinstance(holders, list) else []:
            if isinstance(holder, dict) and isinstance(holder.get("text"), str):
                kept.append((holder, holder.pop("text")))
    data, found = replace_lone_surrogates(data)
    for holder, text in kept:
        holder["text"] = text
    return data, found


def decode_body(body: bytes) -> Any:
    """UTF-8 JSON; raises ValueError (UnicodeDecodeError, JSONDecodeError, or arrays and objects
    nested deeper than the parser's recursion limit) with the reason."""
    text = body.decode("utf-8")
    try:
        data = json.loads(text)
        found = 0
        if _SURROGATE_ESCAPE.search(text):
            data, found = replace_lone_surrogates_outside_documents(data)
    except RecursionError:
        # Thousands of nested `[` would otherwise end the whole read loop (stdio: the server).
        raise ValueError("JSON nested too deeply") from None
    if found:
        log.warning("replaced %d lone UTF-16 surrogate(s) with U+FFFD", found)
    return data


# --- The read loop ------------------------------------------------------------------------------

class Connection:
    """Reads frames for one language server and hands well-formed messages to its protocol (or to
    a TCP connection's stand-in before its `initialize`: tcp.Greeting)."""

    def __init__(self, protocol, frames: FrameReader, stop_event: threading.Event | None = None) -> None:
        self.protocol = protocol
        self.frames = frames
        self.stop_event = stop_event or threading.Event()
        self.exit_code: int | None = None

    def send(self, message: Any) -> None:
        try:
            self.protocol._send_data(message)
        except Exception as exc:   # a closed pipe: the read loop ends at end of stream
            log.info("could not send a transport error: %s", exc)

    async def run(self) -> int | None:
        """Serve until end of stream, `exit` or the stop event; returns the exit status `exit` asked for."""
        while not self.stop_event.is_set() and self.exit_code is None:
            if not await self.answers_read():
                break
            item = await self.frames.next()
            if item is None or self.peer_gone():
                break
            if isinstance(item, FramingError):
                log.error("bad frame: %s", item.reason)
                self.send(error_message(None, PARSE_ERROR, f"Parse error: {item.reason}"))
                self.refuse_if_unauthenticated("a bad frame")
                continue
            if not self.dispatch(item):
                self.refuse_if_unauthenticated("a malformed message")
            # Let the handler just started run to its first real wait before the next message is
            # handled: a completion request plans on the document as it was when the request came,
            # not after a didChange read in the same chunk (pygls starts async handlers as tasks).
            await asyncio.sleep(0)
        return self.exit_code

    def peer_gone(self) -> bool:
        """Whether the socket client has gone (a reset, a failed write): the frames it sent before
        still lie in the buffers, and each was served for nobody. Every answer was a failed write
        that asyncio logs (a WARNING each: one per request of a client that sent 300 and reset),
        and its completions started runs that only the connection's end cancelled."""
        transport = getattr(getattr(self.protocol, "writer", None), "transport", None)
        return transport is not None and transport.is_closing()

    async def answers_read(self) -> bool:
        """False when the client has stopped reading its answers: over a socket, more than
        MAX_UNSENT_BYTES of them wait to be sent and none goes for UNSENT_WAIT_S. Until then no
        more of its requests are read (each would add an answer: they piled up without limit)."""
        transport = getattr(getattr(self.protocol, "writer", None), "transport", None)
        if transport is None or transport.get_write_buffer_size() <= MAX_UNSENT_BYTES:
            return True
        deadline = time.monotonic() + UNSENT_WAIT_S
        while transport.get_write_buffer_size() > MAX_UNSENT_BYTES // 2:
            if transport.is_closing() or time.monotonic() > deadline:
                log.warning("closing a connection that does not read its answers (%d bytes unsent)",
                            transport.get_write_buffer_size())
                transport.abort()
                return False
            await asyncio.sleep(0.05)
        return True

    def refuse_if_unauthenticated(self, what: str) -> None:
        """A connection that must authenticate first (a TCP server with a token) sent something
        that never reached the protocol's gate (a bad frame, a batch, a message that is not one):
        answered above, it is closed as a wrong first message would be (docs/deploy.md)."""
        if getattr(self.protocol, "token", None) is not None and not getattr(self.protocol, "authenticated", True):
            log.warning("refused a connection: %s before initialize", what)
            self.protocol.close_connection()

    def dispatch(self, body: bytes) -> bool:
        """Hand one frame's message on; False when it was answered here as malformed."""
        try:
            data = decode_body(body)
        except ValueError as exc:
            at = body.lower().find(_CONTENT_LENGTH, 1)
            if at < 0:
                self.parse_error(exc)
                return False
            # A body shorter than its Content-Length: the next frame's header was read into it.
            self.frames.unread(body[at:])
            log.warning("frame body shorter than its Content-Length; the next frame starts inside it")
            try:
                data = decode_body(body[:at])
            except ValueError as exc2:
                self.parse_error(exc2)
                return False
        if isinstance(data, list):
            self.batch(data)
            return False
        if not isinstance(data, dict):
            self.send(error_message(None, INVALID_REQUEST, "Invalid Request: a message must be a JSON object"))
            return False
        return self.message(data)

    def parse_error(self, exc: ValueError) -> None:
        reason = "body is not valid UTF-8" if isinstance(exc, UnicodeDecodeError) else "body is not valid JSON"
        log.error("bad frame: %s (%s)", reason, exc)
        self.send(error_message(None, PARSE_ERROR, f"Parse error: {reason}: {exc}"))

    def batch(self, items: list) -> None:
        """LSP has no batches; every request in one is answered -32600, in one array, as JSON-RPC 2.0 asks."""
        if not items:
            self.send(error_message(None, INVALID_REQUEST, "Invalid Request: empty batch"))
            return
        answers = []
        for item in items:
            if not isinstance(item, dict):
                answers.append(error_message(None, INVALID_REQUEST, "Invalid Request: not a JSON object"))
            elif "method" in item and "id" not in item:
                continue   # a notification: no answer, and it is not run
            else:
                answers.append(error_message(usable_id(item), INVALID_REQUEST,
                                             "Invalid Request: batches are not supported by this language server"))
        log.warning("refused a batch of %d messages", len(items))
        if answers:
            self.send(answers)

    def fail_pending(self, msg_id: Any, exc: Exception) -> None:
        """A response to one of our requests that cannot be read (`{"result": 5}` to
        workspace/applyEdit): the request fails with that, rather than waiting for ever (pygls
        drops such a response, and the command that sent the request never answered)."""
        future = self.protocol._request_futures.pop(msg_id, None) if isinstance(msg_id, (int, str)) else None
        if future is not None and not future.done():
            problem = describe(exc.__cause__ or exc)
            future.set_exception(JsonRpcInvalidParams(f"the client's response could not be read: {problem}"))

    def given_up(self, msg_id: Any) -> bool:
        """Whether `msg_id` answers one of our requests that was given up on (a progress token
        the client took more than its 5 s to create, a settings pull superseded by a newer one):
        the answer is dropped quietly (client_requests.ClientRequests.late). pygls set the result
        on the cancelled future, which raised, and an ERROR with a traceback was logged."""
        requests = getattr(self.protocol, "client_requests", None)
        return requests is not None and requests.late(msg_id)

    def message(self, data: dict) -> bool:
        """Hand a message object to the protocol; False when it was answered here as malformed."""
        problem = envelope_error(data)
        if problem is not None:
            log.warning("invalid message: %s", problem["error"]["message"])
            if "method" in data and "id" not in data and problem["id"] is None and data.get("jsonrpc") == "2.0":
                return False   # a notification with a bad field: nothing to answer
            self.send(problem)
            return False
        is_request = "method" in data and "id" in data
        if "method" not in data and self.given_up(data.get("id")):
            return True
        if "method" in data:
            data.setdefault("params", None)   # JSON-RPC lets a request or notification omit params
        try:
            message = self.protocol.structure_message(data)
        except Exception as exc:
            log.warning("could not read %s: %s", data.get("method", "a response"), exc)
            if "method" not in data:
                self.fail_pending(data.get("id"), exc)
            if is_request:
                code = getattr(exc, "code", INTERNAL_ERROR)
                self.send(error_message(data["id"], code, str(exc) or type(exc).__name__))
            return False
        if is_request and getattr(self.protocol, "_shutdown", False) and data["method"] != "exit":
            self.send(error_message(data["id"], INVALID_REQUEST, "Invalid Request: the server is shutting down"))
            return True   # (pygls would drop it unanswered)
        try:
            self.protocol.handle_message(message)
        except SystemExit as exc:   # pygls' exit handler
            self.exit_code = exc.code if isinstance(exc.code, int) else 0
            self.stop_event.set()
        except Exception as exc:
            log.exception("error handling %s", data.get("method", "a response"))
            if is_request:
                self.send(error_message(data["id"], INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"))
        return True


# --- stdio --------------------------------------------------------------------------------------

class ThreadedByteSource:
    """Chunks of a blocking binary stream, read on a daemon thread (one read per request), so a
    process that is told to exit is never held up by a read that waits for the client."""

    def __init__(self, stream) -> None:
        self._read = getattr(stream, "read1", None) or stream.read
        self._want = threading.Semaphore(0)
        self._pending: tuple[asyncio.AbstractEventLoop, asyncio.Future] | None = None
        self._thread: threading.Thread | None = None

    async def read(self) -> bytes:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._pending = (loop, future)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dllm-stdin", daemon=True)
            self._thread.start()
        self._want.release()
        return await future

    def end(self) -> None:
        """End the stream here, as if the client had closed it (call on the loop's thread)."""
        if self._pending is not None:
            _resolve(self._pending[1], b"")

    def _run(self) -> None:
        while True:
            self._want.acquire()
            try:
                data = self._read(CHUNK)
            except Exception as exc:
                log.info("reading stdin failed: %s", exc)
                data = b""
            loop, future = self._pending
            try:
                loop.call_soon_threadsafe(_resolve, future, data or b"")
            except RuntimeError:   # the loop is gone: the server is exiting
                return
            if not data:
                return


def _resolve(future: asyncio.Future, data: bytes) -> None:
    if not future.done():
        future.set_result(data)


class StdoutWriter:
    """stdout for pygls. Once it is closed (`exit`) or the client has gone, writes are dropped: the
    tasks still running as the loop ends (a load's progress report, a completion's answer) would
    otherwise each fail, and pygls logs each failure with the whole chain of the ones before it
    (130,000 lines of tracebacks for one `exit` during a model load)."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self._gone = False

    def write(self, data: bytes) -> None:
        if self._gone:
            return
        try:
            self._stream.write(data)
            self._stream.flush()
        except (OSError, ValueError) as exc:   # BrokenPipeError; ValueError: the file was closed
            self._gone = True
            log.info("stdout is closed (%s): nothing more is sent", exc)

    def close(self) -> None:
        self._gone = True
        self._stream.close()


# How often a stdio server looks whether its client's process (`initialize.processId`) still runs.
CLIENT_POLL_S = 2.0


async def end_when_client_gone(server, source: ThreadedByteSource, poll_s: float = CLIENT_POLL_S) -> None:
    """End the stdin stream once the process `initialize` named has ended. Its stdin reaches its
    end when the editor dies, unless another process holds it too (a helper the editor forked, a
    wrapper, a proxy): the server then stayed, its model loaded, as long as that one lived. A pid
    not running when it is named (the editor in another pid namespace: a container, a remote)
    is not watched."""
    pid = None
    while pid is None:
        await asyncio.sleep(poll_s)
        pid = getattr(server, "process_id", None)
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or not process_alive(pid):
        return
    while process_alive(pid):
        await asyncio.sleep(poll_s)
    log.warning("the client's process %d has ended: exiting", pid)
    source.end()


def start_io(server, stdin=None, stdout=None) -> int:
    """Serve one client on stdin/stdout (replaces pygls' start_io); returns the status the process
    is to exit with: 1 for an `exit` without `shutdown`, 130 when interrupted (Ctrl-C), else 0."""
    server._stop_event = stop_event = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
    source = ThreadedByteSource(stdin or sys.stdin.buffer)

    async def serve() -> int | None:
        watch = asyncio.ensure_future(end_when_client_gone(server, source))
        try:
            return await Connection(server.protocol, FrameReader(source.read), stop_event).run()
        finally:
            watch.cancel()

    code: int | None = None
    try:
        code = asyncio.run(serve())
    except BrokenPipeError:
        log.error("connection to the client is lost; shutting down")
    except KeyboardInterrupt:
        code = 130
    finally:
        server.shutdown()
    if code == 1:
        log.info("exit without shutdown: exiting with status %d", code)
    return code or 0

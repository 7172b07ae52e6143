"""The requests this server sends its client (workspace/configuration, workspace/applyEdit,
window/workDoneProgress/create, any other), each with a bounded life.

pygls files every request it sends in its table of pending requests and takes it out only when an
answer comes: a request the client never answered stayed there, given up on or not, until the
client disconnected (20,000 unanswered settings pulls held ~118 MiB). Here each request

- is given up on at its caller's timeout (CONFIGURATION_GIVE_UP_S, APPLY_EDIT_TIMEOUT_S,
  PROGRESS_CREATE_S), and at the latest after REQUEST_LIFE_S, which fails it with RequestGivenUp
  (a TimeoutError: to its caller, a request with no answer);
- is one of at most MAX_OUTSTANDING unanswered ones per connection: past that a new request is not
  sent and fails at once with RequestNotSent (its caller's error path: the edit not applied, the
  options kept, the load reported without progress). Not sent rather than the oldest dropped: a
  dropped applyEdit may still be applied by the client, which its caller could then not know;
- leaves pygls' bookkeeping as soon as it is answered or given up on;
- has an id of ours (`dllm-lsp:<n>`), so an answer that comes after it was given up on is known as
  one without remembering it, and dropped quietly (the first one per connection is logged at INFO).
"""
from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from pygls.exceptions import JsonRpcException

log = logging.getLogger(__name__)

# The longest a request waits for its answer when its caller sets no shorter wait; above every
# caller's own (app.CONFIGURATION_GIVE_UP_S is the longest, 30 s), so theirs apply first.
REQUEST_LIFE_S = 60.0
# Unanswered requests a connection may have: an editor answers in milliseconds, and the server
# keeps at most one settings pull, one progress token per load and one applyEdit per document
# waiting; only a client that answers nothing gets near it.
MAX_OUTSTANDING = 64
ID_PREFIX = "dllm-lsp:"


class RequestGivenUp(TimeoutError):
    """No answer within REQUEST_LIFE_S: the request is given up on (its answer, if it comes, is dropped)."""


class RequestNotSent(JsonRpcException):
    """The request was not sent: too many of this connection's requests are still unanswered."""


def forget_in_pygls(protocol: Any, msg_id: str, future: Future) -> None:
    """Take a request this server sent out of pygls' bookkeeping.

    pygls 2.1 (JsonRPCProtocol.send_request) files each request it sends in two private dicts,
    `_request_futures` (id -> the Future of its answer) and `_result_types` (id -> the type its
    answer is read as), and removes them only when an answer comes (`_result_types` not even
    then when the answer is an error); it has no public way to give a request up. This is the only
    place that reaches in for it; tests/server/test_s34_pending_requests.py fails if pygls files
    its requests anywhere else."""
    if protocol._request_futures.get(msg_id) is future:
        del protocol._request_futures[msg_id]
    protocol._result_types.pop(msg_id, None)


class ClientRequests:
    """One connection's requests to its client that still wait for an answer."""

    def __init__(self, protocol: Any, limit: int | None = None, life_s: float | None = None) -> None:
        self.protocol = protocol
        # read when the connection starts, not when this module was imported
        self.limit = MAX_OUTSTANDING if limit is None else limit
        self.life_s = REQUEST_LIFE_S if life_s is None else life_s
        self._numbers = itertools.count(1)
        self._last = 0   # the highest id number handed out: the ids at or below it are ours
        # id -> (method, the answer's Future, the timer that gives it up)
        self._waiting: dict[str, tuple[str, Future, asyncio.TimerHandle | None]] = {}
        self.refused = 0        # requests not sent (MAX_OUTSTANDING), warned of once
        self.late_answers = 0   # answers to requests given up on, logged once at INFO

    def __len__(self) -> int:
        return len(self._waiting)

    def send(self, send: Callable[[str, Any, Any, str], Future], method: str, params: Any,
             callback: Any, msg_id: str | None) -> Future:
        """Send with `send` (pygls' send_request), or fail at once when too many wait already."""
        if len(self._waiting) >= self.limit:
            return self._refuse(method)
        if msg_id is None:
            self._last = next(self._numbers)
            msg_id = f"{ID_PREFIX}{self._last}"
        future = send(method, params, callback, msg_id)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:   # sent from a thread: bounded by MAX_OUTSTANDING only
            loop = None
        timer = loop.call_later(self.life_s, self._expire, msg_id) if loop is not None else None
        self._waiting[msg_id] = (method, future, timer)
        future.add_done_callback(lambda done, key=msg_id: self._done(key, done))
        return future

    def _refuse(self, method: str) -> Future:
        self.refused += 1
        message = f"{method} not sent: {len(self._waiting)} requests to the client are still unanswered"
        if self.refused == 1:   # a client that answers nothing would otherwise get a line per request
            log.warning("%s (MAX_OUTSTANDING; told once per connection)", message)
        else:
            log.debug("%s", message)
        future: Future = Future()
        future.set_exception(RequestNotSent(message))
        return future

    def _expire(self, msg_id: str) -> None:
        entry = self._waiting.get(msg_id)
        if entry is not None and not entry[1].done():
            log.info("%s (request %s): no answer in %g s, given up", entry[0], msg_id, self.life_s)
            entry[1].set_exception(RequestGivenUp(f"no answer in {self.life_s:g} s"))

    def _done(self, msg_id: str, future: Future) -> None:
        """Answered, or given up on (its caller's timeout cancelled it, or _expire failed it)."""
        entry = self._waiting.get(msg_id)
        if entry is not None and entry[1] is future:
            del self._waiting[msg_id]
            if entry[2] is not None:
                entry[2].cancel()   # (a cancelled timer lets go of this connection at once)
        forget_in_pygls(self.protocol, msg_id, future)

    def late(self, msg_id: Any) -> bool:
        """Whether `msg_id` answers one of our requests that no longer waits (given up on): then
        the answer is to be dropped, quietly. pygls warned of each as an unknown id, or set it on
        the cancelled request, which raised and logged an ERROR with a traceback."""
        if not isinstance(msg_id, str) or not msg_id.startswith(ID_PREFIX) or msg_id in self._waiting:
            return False
        number = msg_id[len(ID_PREFIX):]
        # ASCII digits, and not more of them than a count has: int() fails on others ("²", or
        # past Python's 4,300 digits), and the answer would end the read loop
        if not (number.isascii() and number.isdigit() and len(number) <= 20) or int(number) > self._last:
            return False
        self.late_answers += 1
        if self.late_answers == 1:
            log.info("an answer to request %s came after it was given up on: dropped (later ones quietly)", msg_id)
        else:
            log.debug("an answer to request %s came after it was given up on: dropped", msg_id)
        return True

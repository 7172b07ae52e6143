"""Holding a big document's parse in a test: its TreeSlot lock taken, so whatever reads the tree
waits as long as the test needs, with no clock."""
from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

from dllm_lsp.server.documents import DocumentTrees


@contextlib.contextmanager
def parse_held(trees: DocumentTrees, uri: str) -> Iterator[None]:
    """Hold the document's parses for the block. Freed after 30 s whatever happens: code that
    waits for the tree on the event loop then fails the test's check instead of hanging it."""
    lock = trees._parsed[uri]._lock
    lock.acquire()
    safety = threading.Timer(30, lock.release)
    safety.start()
    try:
        yield
    finally:
        safety.cancel()
        if lock.locked():
            lock.release()


async def assert_still_waiting(task: asyncio.Future, what: str) -> None:
    """The loop runs on while the parse is held, and `task` (which needs the tree) still waits."""
    for _ in range(20):
        await asyncio.sleep(0)
    assert not task.done(), f"{what} read the tree on the event loop"

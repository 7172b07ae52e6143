"""Requests sent at the same moment from their own threads, as concurrent clients send them."""
from __future__ import annotations

import threading

from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest


def infill_together(engine: Engine, requests: list[InfillRequest], settings: DecodeSettings) -> list:
    """Each request's candidates, every request started from its own thread behind one barrier."""
    results: list = [None] * len(requests)
    start = threading.Barrier(len(requests))

    def client(i: int) -> None:
        start.wait()
        results[i] = engine.infill(requests[i], settings).candidates

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results

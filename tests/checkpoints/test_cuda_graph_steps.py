"""An open checkpoint's cached steps replayed from a captured graph (`--cuda-graphs`).

The capture needs a CUDA device (the GPU job's check and `bench checkpoint` run it there); on the
CPU `GraphedCall` runs the same bookkeeping eagerly on its static buffers (the active rows copied
in, the logits of every span row a buffer the next call overwrites, the first cached step
answered by the warm-up call). These tests hold that bookkeeping to the eager completions, in
every cache mode, and count the captures: one per stored context."""
from __future__ import annotations

import logging

import pytest

from dllm_lsp.engine import cuda_graph
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import CacheSettings, DecodeSettings, InfillRequest
from dllm_lsp.server.model_host import use_cuda_graphs

REQUESTS = [
    InfillRequest.single("def area(width, height):\n    total = width * height\n    return ", "\n\nprint(1)\n", 12),
    InfillRequest.single("class Stack:\n    def push(self, item):\n        ", "\n    def pop(self):\n", 16,
                         single_line=False),
]
CACHES = (CacheSettings("dual", 0), CacheSettings("dual", 2), CacheSettings("reuse", 0), CacheSettings("none"))


def texts(engine: Engine, settings: DecodeSettings, cache: CacheSettings) -> list[str]:
    return [engine.infill(request, settings, cache=cache).text for request in REQUESTS]


@pytest.fixture
def graphs_off_after(loaded):
    yield
    for denoiser in loaded.values():
        denoiser.cuda_graphs = False
        denoiser.forget_requests()


@pytest.mark.parametrize("layout", ["llada", "dream", "dreamon", "open-dcoder"])
def test_replayed_cached_steps_give_the_eager_completions(layout, loaded, graphs_off_after):
    denoiser = loaded[layout]
    engine = Engine(denoiser, batching=False)
    for cache in CACHES:
        for settings in (DecodeSettings(steps=6), DecodeSettings(steps=4, n=2, temperature=0.8, seed=3)):
            denoiser.forget_requests()          # "reuse" must find the same kept contexts both times
            eager = texts(engine, settings, cache)
            denoiser.cuda_graphs = True
            denoiser.forget_requests()
            try:
                replayed = texts(engine, settings, cache)
            finally:
                denoiser.cuda_graphs = False
            assert replayed == eager, (cache, settings)


class Counting(cuda_graph.GraphedCall):
    made: list["Counting"] = []

    def __init__(self, fn, inputs):
        super().__init__(fn, inputs)
        self.replays = 0
        Counting.made.append(self)

    def __call__(self, *inputs):
        self.replays += 1
        return super().__call__(*inputs)


@pytest.mark.parametrize("cache, captures", [(CacheSettings("dual", 0), 1), (CacheSettings("dual", 3), 2),
                                             (CacheSettings("none"), 0)])
def test_a_session_captures_once_per_stored_context(cache, captures, loaded, graphs_off_after, monkeypatch):
    denoiser = loaded["dream"]
    Counting.made = []
    monkeypatch.setattr(cuda_graph, "GraphedCall", Counting)
    denoiser.cuda_graphs = True
    settings = DecodeSettings(steps=6, threshold=1.0, pad_collapse_threshold=2.0, ends_in_order=False,
                              slot_start_tokens=0)     # six steps exactly, one session
    Engine(denoiser, batching=False).infill(REQUESTS[1], settings, cache=cache)
    session = denoiser.last_session
    assert session.steps == 6
    # dual, no refresh: step 1 is the full pass, step 2 captures (answered by its warm-up), 3-6 replay.
    # Refreshed every 3 steps: full passes at steps 1 and 4, a capture after each, 2 + 1 replays.
    # Uncached: every step a full pass, nothing to capture.
    assert len(Counting.made) == captures
    assert sum(graph.replays for graph in Counting.made) == 6 - session.full_passes - captures


def test_a_failed_capture_falls_back_to_eager_steps_once_and_for_all(loaded, graphs_off_after, monkeypatch, caplog):
    denoiser = loaded["llada"]
    engine = Engine(denoiser, batching=False)
    settings = DecodeSettings(steps=6)
    eager = texts(engine, settings, CacheSettings())

    def cannot_capture(fn, inputs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(cuda_graph, "GraphedCall", cannot_capture)
    denoiser.cuda_graphs = True
    with caplog.at_level(logging.WARNING, logger="dllm_lsp.engine"):
        assert texts(engine, settings, CacheSettings()) == eager
    assert denoiser.cuda_graphs is False
    warnings = [r.message for r in caplog.records if "CUDA graph" in r.message]
    assert len(warnings) == 1 and denoiser.name in warnings[0]


def test_serve_turns_a_checkpoints_graphs_on_only_on_cuda(loaded):
    engine = Engine(loaded["dream"], batching=False)
    use_cuda_graphs(engine, True)
    assert engine.denoiser.cuda_graphs is False      # a CPU has nothing to capture

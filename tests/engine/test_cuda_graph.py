"""A lone request's steady steps replayed from a captured graph (engine/cuda_graph.py).

The capture itself needs a CUDA device (the GPU job's check and `dllm-lsp bench` run it there);
on the CPU `GraphedCall` runs the same bookkeeping eagerly on its static buffers: inputs copied
in, the output a buffer the next call overwrites, the session's first steady step answered by
the warm-up call. These tests hold that bookkeeping to the eager engine's completions."""
from __future__ import annotations

import logging

import pytest
import torch

from dllm_lsp.arch.layers import Rotary
from dllm_lsp.engine import cuda_graph
from dllm_lsp.engine.cuda_graph import GraphedCall
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model
from dllm_lsp.server.model_host import local_engine

from .together import infill_together

REQUESTS = [
    InfillRequest.single("def area(width, height):\n    total = width * height\n    return ", "\n\nprint(1)\n", 24),
    InfillRequest.single("class Stack:\n    def push(self, item):\n        ", "\n    def pop(self):\n", 48,
                         single_line=False),
    InfillRequest.single("import os\n" * 6 + "path = os.path.join(", ")\n", 12),
]


def texts(engine: Engine, settings: DecodeSettings) -> list[str]:
    return [engine.infill(request, settings).text for request in REQUESTS]


@pytest.mark.parametrize("model", ["tiny", "shipped"])
def test_replayed_steps_give_the_eager_completions(model, tiny_model_dir):
    denoiser = load_model(tiny_model_dir if model == "tiny" else None, "cpu")
    engine = Engine(denoiser, batching=False)
    for settings in (DecodeSettings(steps=6), DecodeSettings(steps=6, slot_start_tokens=0),
                     DecodeSettings(steps=4, n=3, temperature=0.8, greedy_first=True, seed=5)):
        eager = texts(engine, settings)
        denoiser.cuda_graphs = True
        try:
            replayed = texts(engine, settings)
        finally:
            denoiser.cuda_graphs = False
        assert replayed == eager, settings


def test_a_session_captures_once_and_replays_its_steady_steps(tiny_model_dir, monkeypatch):
    denoiser = load_model(tiny_model_dir, "cpu")
    denoiser.cuda_graphs = True
    made, calls = [], []

    class Counting(GraphedCall):
        def __init__(self, fn, inputs):
            super().__init__(fn, inputs)
            made.append(self)

        def __call__(self, *inputs):
            calls.append(inputs[0].shape)
            return super().__call__(*inputs)

    monkeypatch.setattr(cuda_graph, "GraphedCall", Counting)
    result = Engine(denoiser, batching=False).infill(REQUESTS[1], DecodeSettings(steps=8, slot_start_tokens=0))
    # Step 1 computes the context with the span (no graph); step 2 captures (its answer is the
    # warm-up's); the rest replay. One slot at full width: one session, one graph.
    assert len(made) == 1 and result.steps >= 3
    assert len(calls) == result.steps - 2


def test_the_static_output_is_overwritten_so_the_session_hands_out_copies():
    double = GraphedCall(lambda x: x * 2, (torch.tensor([1.0, 2.0]),))
    assert double.first.tolist() == [2.0, 4.0]
    out = double(torch.tensor([3.0, 4.0]))
    assert out.tolist() == [6.0, 8.0]
    again = double(torch.tensor([5.0, 6.0]))
    assert again.tolist() == [10.0, 12.0]


def test_a_failed_capture_falls_back_to_eager_steps_once_and_for_all(tiny_model_dir, monkeypatch, caplog):
    denoiser = load_model(tiny_model_dir, "cpu")
    engine = Engine(denoiser, batching=False)
    settings = DecodeSettings(steps=6)
    eager = texts(engine, settings)

    def cannot_capture(fn, inputs):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(cuda_graph, "GraphedCall", cannot_capture)
    denoiser.cuda_graphs = True
    with caplog.at_level(logging.WARNING, logger="dllm_lsp.engine"):
        assert texts(engine, settings) == eager
    assert denoiser.cuda_graphs is False
    warnings = [r.message for r in caplog.records if "CUDA graph" in r.message]
    assert len(warnings) == 1 and "running it eagerly from now on" in warnings[0]


def test_with_the_step_scheduler_a_lone_request_replays_and_shared_steps_stay_eager(tiny_model_dir):
    denoiser = load_model(tiny_model_dir, "cpu")
    settings = DecodeSettings(steps=6)
    alone = Engine(denoiser, batching=False)
    eager = texts(alone, settings)
    served = Engine(denoiser, batching=True)
    try:
        shared = infill_together(served, REQUESTS, settings)
        denoiser.cuda_graphs = True
        assert texts(served, settings) == eager                       # one at a time: replayed
        # At once: shared passes (and a request's steps alone once the others are done).
        assert infill_together(served, REQUESTS, settings) == shared
    finally:
        denoiser.cuda_graphs = False
        served.scheduler.close()


def test_serve_turns_graphs_on_only_on_cuda(tiny_model_dir):
    engine = local_engine(str(tiny_model_dir), "cpu", batching=False, warm_up=False, cuda_graphs=True)
    assert engine.denoiser.cuda_graphs is False      # a CPU has nothing to capture


def test_rotary_frequencies_reach_a_device_once():
    # A copy per step would be a host-to-device transfer inside every step: a sync, and nothing a
    # CUDA graph can capture. Copied once per device, the step reuses it.
    rotary = Rotary(16, 1e4)
    device = torch.device("cpu")
    assert rotary.frequencies_on(device) is rotary.frequencies_on(device)
    cos, sin = rotary.cos_sin(torch.arange(5), torch.float32)
    angles = torch.arange(5, dtype=torch.float64)[:, None] * rotary.inv_freq
    torch.testing.assert_close(cos[:, :8], angles.cos().float())
    torch.testing.assert_close(sin[:, 8:], angles.sin().float())

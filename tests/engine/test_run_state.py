"""Where a fixed-length run keeps its own state (denoise.state_device): on the host by default, on
the model's device with DLLM_LSP_RUN_STATE=device (the layout `bench` compares it with on a GPU,
and the GPU job's fallback). On this CPU the two are one device, so what is tested here is the
choice, the model-facing inputs, and that the benchmark's variants run and agree; the GPU job's
check compares the two layouts' completions on the device."""
from __future__ import annotations

import pytest
import torch

from dllm_lsp.bench.latency import run_latency_bench
from dllm_lsp.engine.denoise import RUN_STATE_ENV, FixedLengthRun, state_device
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model


def test_the_state_is_kept_on_the_host_unless_asked_otherwise(monkeypatch):
    model_device = torch.device("cuda", 1)     # a name only: nothing is allocated there
    monkeypatch.delenv(RUN_STATE_ENV, raising=False)
    assert state_device(model_device) == torch.device("cpu")
    monkeypatch.setenv(RUN_STATE_ENV, " Device ")
    assert state_device(model_device) == model_device
    monkeypatch.setenv(RUN_STATE_ENV, "gpu")
    with pytest.raises(ValueError, match="DLLM_LSP_RUN_STATE must be one of"):
        state_device(model_device)


def test_the_model_gets_the_canvas_and_its_undecided_rows_copied_once_a_step(tiny_model_dir):
    denoiser = load_model(tiny_model_dir, "cpu")
    engine = Engine(denoiser, batching=False)
    request = InfillRequest.single("def area(width, height):\n    return ", "\n", 12)
    run = FixedLengthRun(denoiser, engine.canvas(request), DecodeSettings(steps=4))
    ids, rows = run.ids, run.rows()
    assert run.ids is ids and run.rows() is rows                  # one copy a step, however often asked
    assert ids.device == denoiser.device and rows.dtype == torch.bool
    assert torch.equal(ids, run.canvas_ids) and torch.equal(rows, run.masked)
    run.advance(run.session.logits(ids, rows))
    assert run.steps == 1 and int(run.masked.sum()) < rows.numel()
    assert torch.equal(run.rows(), run.masked) and torch.equal(run.ids, run.canvas_ids)   # the new state


def test_bench_times_the_state_on_the_models_device_beside_the_host(tiny_model_dir):
    engine = Engine(load_model(tiny_model_dir, "cpu"), batching=False)
    figures = run_latency_bench(engine, runs=1, profile=True, cuda_graphs=True, device_state=True)
    cases = figures["cases"]
    for name in ("line_tail", "block_body"):
        for steps in ("", "_cuda_graphs"):
            on_device, on_host = cases[f"{name}{steps}_device_state"], cases[name + steps]
            assert on_device["same_completion"] and on_device["completion"] == on_host["completion"]
            assert on_device["p50_vs_host_state"] == round(on_device["p50_ms"] / on_host["p50_ms"], 3)
    assert set(figures["profile"]) == {"line_tail", "line_tail_cuda_graphs", "line_tail_device_state",
                                       "line_tail_cuda_graphs_device_state"}
    assert figures["settings"]["device_state_variant"] and figures["settings"]["run_state"] == "host"
    # Off by default where the model is on the host: the two layouts are one there.
    assert not any("device_state" in name for name in run_latency_bench(engine, runs=1)["cases"])

"""Engine.prepare: a warm-up pass and a step-cost probe before the first request, with the
records (counters, cross-request caches) started afresh after them."""
from __future__ import annotations

import time

import pytest

from dllm_lsp.engine import engine as engine_module
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model


@pytest.fixture()
def tiny(tiny_model_dir):
    return load_model(str(tiny_model_dir), "cpu")


def test_prepare_seeds_the_step_cost_and_leaves_no_records(tiny):
    engine = Engine(tiny)
    assert engine.scheduler.cost.fit() is None and engine.prepared is None
    prepared = engine.prepare()
    assert prepared == engine.prepared and prepared["warmupMs"] > 0 and prepared["probeSteps"] >= 4
    assert prepared["tokenIndexMs"] >= 0 and engine._token_index is not None   # built before the first word typed
    coeffs = engine.scheduler.cost.fit()       # known before any request: from the probe's two sizes
    assert coeffs is not None and coeffs.per_row > 0
    assert prepared["stepCostMs"]["perRow"] == round(coeffs.per_row * 1000, 4)
    stats = engine.scheduler.stats()
    assert stats["forwardPasses"] == stats["requestSteps"] == 0 and stats["busySeconds"] == 0
    assert tiny.context_stats() == {"sessions": 0, "tokens": 0, "reusedTokens": 0, "seconds": 0.0}
    assert tiny._prefix_caches == []           # the probe's text is not there to be reused
    result = engine.infill(InfillRequest.single("def f(x):\n    return ", "\n", 6), DecodeSettings(steps=3))
    assert engine.scheduler.stats()["requestSteps"] == result.steps
    assert tiny.context_stats()["reusedTokens"] == 0


def test_the_first_pass_one_off_cost_stays_out_of_the_fit(tiny, monkeypatch):
    """A first pass that takes long (a Triton compile on a GPU) is the warm-up's: the probe after
    it is what the fit learns from."""
    slow_first = {"left": 1}
    real_session = tiny.session

    def session(canvas, batch, cache=None):
        inner = real_session(canvas, batch) if cache is None else real_session(canvas, batch, cache)
        real_logits = inner.logits

        def logits(ids, rows=None):
            if slow_first["left"]:
                slow_first["left"] -= 1
                time.sleep(0.5)
            return real_logits(ids, rows)

        inner.logits = logits
        return inner

    tiny.session = session
    engine = Engine(tiny)
    monkeypatch.setattr(engine_module, "PROBE_MAX_WARM_UP_S", 5.0)   # this warm-up is slow on purpose
    prepared = engine.prepare()
    assert prepared["warmupMs"] >= 500 and slow_first["left"] == 0
    coeffs = engine.scheduler.cost.fit()
    assert coeffs is not None and coeffs.fixed < 0.1 and coeffs.per_row < 0.01, coeffs


def test_a_slow_model_skips_the_probe(tiny, monkeypatch):
    monkeypatch.setattr(engine_module, "PROBE_MAX_WARM_UP_S", 0.0)
    prepared = Engine(tiny).prepare()
    assert prepared["warmupMs"] > 0 and prepared["probeSteps"] == 0 and prepared["stepCostMs"] is None


def test_prepare_without_batching_only_warms_up(tiny):
    engine = Engine(tiny, batching=False)
    prepared = engine.prepare()
    assert prepared["warmupMs"] > 0 and prepared["probeSteps"] == 0 and prepared["stepCostMs"] is None
    assert engine.work_stats()["busySeconds"] == 0


def test_a_failed_warm_up_leaves_a_serving_engine(tiny_model_dir, monkeypatch, caplog):
    """Out of memory in the warm-up, say: the load still succeeds, and requests report their own errors."""
    from dllm_lsp.server.model_host import local_engine

    def fail(self):
        raise RuntimeError("CUDA out of memory (forced)")

    monkeypatch.setattr(Engine, "prepare", fail)
    engine = local_engine(str(tiny_model_dir), "cpu")
    assert engine.prepared is None and "serving without a warm-up" in caplog.text
    assert engine.infill(InfillRequest.single("x = ", "\n", 4), DecodeSettings(steps=2)).steps >= 1
    monkeypatch.undo()
    assert local_engine(str(tiny_model_dir), "cpu", warm_up=False).prepared is None

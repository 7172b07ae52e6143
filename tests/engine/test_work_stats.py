"""The engine's account of the model's time (`Engine.work_stats`): busy seconds, and of them the
context work, with the tokens the prefix cache served. Benchmarks divide by these, so they must
count what happened: typing at the end of the prefix reuses its tokens, a cache of 0 entries none."""
from __future__ import annotations

import pytest

from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model

PREFIX = "def area(width, height):\n    value = width * height\n    return "
SUFFIX = "\n\n\nprint(area(2, 3))\n"
SETTINGS = DecodeSettings(steps=2, threshold=1.0)


def typed(engine: Engine, extra: str) -> dict:
    engine.infill(InfillRequest.single(PREFIX + extra, SUFFIX, 8), SETTINGS)
    return engine.work_stats()


@pytest.mark.parametrize("batching", [True, False])
def test_typing_at_the_prefix_end_reuses_its_context_and_is_counted(tiny_model_dir, batching):
    engine = Engine(load_model(tiny_model_dir, "cpu"), batching=batching)
    empty = engine.work_stats()
    assert empty["busySeconds"] == 0 and empty["context"]["sessions"] == 0
    first = typed(engine, "")
    second = typed(engine, "wid")
    ctx1, ctx2 = first["context"], second["context"]
    assert ctx1["sessions"] >= 1 and ctx1["tokens"] > 20 and ctx1["reusedTokens"] == 0   # nothing cached yet
    assert 0 < ctx1["seconds"] <= first["busySeconds"]            # context work is part of the busy time
    new_tokens = ctx2["tokens"] - ctx1["tokens"]
    reused = ctx2["reusedTokens"] - ctx1["reusedTokens"]
    # The second prefix extends the first: every token before the change came from the cache,
    # the suffix after it (whose positions moved) did not.
    assert 20 < reused < new_tokens
    assert second["busySeconds"] > first["busySeconds"]


def test_without_a_prefix_cache_nothing_is_reused(tiny_model_dir):
    engine = Engine(load_model(tiny_model_dir, "cpu"))
    engine.denoiser.prefix_cache_entries = 0
    typed(engine, "")
    stats = typed(engine, "wid")["context"]
    assert stats["tokens"] > 40 and stats["reusedTokens"] == 0

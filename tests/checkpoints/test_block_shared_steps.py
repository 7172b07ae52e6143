"""Block-diffusion checkpoints (SDAR, Stable-DiffCoder, Fast-dLLM v2, LLaDA2.0) share their steps.

- A finished block joins the exact cache in the next block's first pass, not in a pass of its
  own, and the context joins it in the first: a decode takes one forward pass per step, and its tokens are
  those of recomputing every block from scratch (test_block_families.py holds that equality).
- `BlockDenoiser.batch_logits`: several requests' block calls (caches of different lengths,
  finished blocks joining or not, several candidates, rows selected or not) in one pass give
  each request what its own call gives it, and leave each cache as its own call would.
- Through the engine's step scheduler: concurrent block-wise requests get the completions they
  get alone, in fewer forward passes than request steps; a cancelled one leaves at a step
  boundary and the others finish; a block model's context counts as context work.
"""
from __future__ import annotations

import copy
import threading

import pytest
import torch

from dllm_lsp.checkpoints.block_tiny import BLOCK_LAYOUTS, FAMILY_OF, write_tiny_block_checkpoint
from dllm_lsp.engine.blockwise import BlockwiseRun, decode_blockwise
from dllm_lsp.engine.denoise import Cancelled, StepRows
from dllm_lsp.engine.denoiser import BlockStep, Canvas
from dllm_lsp.engine.engine import CancelToken, Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model
from tests.engine.together import infill_together

BLOCK = [layout for layout in BLOCK_LAYOUTS if FAMILY_OF[layout].attention == "block"]
REQUESTS = [InfillRequest.single("def f(x):\n    return ", "\n", 9),
            InfillRequest.single("a = [", "]\n", 6),
            InfillRequest.single("import os\n" * 6 + "p = os.path.", "\n", 7)]
SLOW = DecodeSettings(steps=3, threshold=1.0)   # no early commits: every block takes its whole budget


@pytest.fixture(scope="module")
def block_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("block-shared")
    return {layout: load_model(str(write_tiny_block_checkpoint(root / layout, layout, seed=30 + i)), "cpu")
            for i, layout in enumerate(BLOCK)}


class CountingModel:
    """Counts the forward passes (`ragged` calls) and the rows they ran."""

    def __init__(self, model) -> None:
        self.model, self.passes, self.rows = model, 0, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def ragged(self, ids, *args, **kwargs):
        self.passes += 1
        self.rows.append(sum(int(i.numel()) for i in ids))
        return self.model.ragged(ids, *args, **kwargs)


def _canvas(port, prefix: str, width: int, suffix: str = "\n") -> Canvas:
    context = port.encode(prefix)
    return Canvas(torch.tensor(context + [port.special.mask_id] * width + port.encode(suffix)),
                  [(len(context), len(context) + width)])


@pytest.mark.parametrize("layout", BLOCK)
def test_a_finished_block_joins_the_cache_in_the_next_blocks_pass(layout, block_models):
    port = copy.copy(block_models[layout])
    port.model = counting = CountingModel(port.model)
    bs = port.block_size
    canvas = _canvas(port, "def area(width, height):\n    return ", 4 * bs + 1)
    out = decode_blockwise(port, canvas, DecodeSettings(steps=2, threshold=1.0))
    blocks = -(-(canvas.slot_ranges[0][1]) // bs) - canvas.slot_ranges[0][0] // bs
    assert blocks >= 4
    # One pass per step: the context joins the cache in the first one, and each finished block in
    # the next block's first (a pass of their own would add 1 + blocks - 1).
    assert counting.passes == out.steps, (counting.passes, out.steps)
    context = len(port.context_ids(canvas.ids[:canvas.slot_ranges[0][0]].tolist(), port.encode("\n")))
    assert counting.rows[0] == (context // bs + 1) * bs and counting.rows[0] > bs
    # The scheduler's estimate: the context blocks as context rows, the first block as span rows.
    assert BlockwiseRun.planned_rows(port, canvas, DecodeSettings()) == StepRows(bs, counting.rows[0] - bs)
    assert BlockwiseRun(port, canvas, DecodeSettings()).step_rows == StepRows(bs, counting.rows[0] - bs)
    # The passes after a block finished carry its rows as well as the new block's.
    assert max(counting.rows[1:]) == 2 * bs and min(counting.rows[1:]) == bs


@pytest.mark.parametrize("layout", BLOCK)
def test_one_pass_gives_each_request_its_own_block_logits(layout, block_models):
    port = block_models[layout]
    bs = port.block_size
    torch.manual_seed(3)
    vocab = port.vocab_limit

    def setup(batch: int, cached_blocks: int, finished_blocks: int):
        """A cache of `cached_blocks` blocks, then a call with `finished_blocks` blocks to join it."""
        cache = port.new_cache(batch)
        ids = torch.randint(3, vocab, (batch, (cached_blocks + finished_blocks + 1) * bs))
        ids[:, -bs + 1:] = port.special.mask_id
        if cached_blocks:
            port.prefill(cache, ids[:, :cached_blocks * bs], 0)
        return cache, ids[:, cached_blocks * bs:], cached_blocks * bs

    cases = [(1, 2, 0), (2, 3, 1), (1, 0, 0), (3, 1, 2)]
    rows = [None, torch.tensor([[True, False] * (bs // 2)] * 2), None,
            torch.tensor([[i % 2 == 0] * bs for i in range(3)])]
    alone, alone_caches = [], []
    for (batch, cached, finished), selected in zip(cases, rows):
        cache, ids, start = setup(batch, cached, finished)
        alone.append(port.block_logits(cache, ids, start, selected))
        alone_caches.append(cache)
    torch.manual_seed(3)
    steps, all_ids = [], []
    for batch, cached, finished in cases:
        cache, ids, start = setup(batch, cached, finished)
        steps.append(BlockStep(port, cache, start))
        all_ids.append(ids)
    shared = port.batch_logits(steps, all_ids, rows)
    assert len(shared) == len(cases)
    for got, want in zip(shared, alone):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for step, want in zip(steps, alone_caches):
        assert step.cache.length == want.length            # the finished blocks joined each cache
        for (k, v), (k0, v0) in zip(step.cache.kv or [], want.kv or []):
            torch.testing.assert_close(k, k0, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(v, v0, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("layout", ["sdar", "fast-dllm-v2", "llada2"])
def test_concurrent_block_requests_share_steps_and_get_what_they_get_alone(layout, block_models):
    model = block_models[layout]
    want = [Engine(model, batching=False).infill(r, SLOW).candidates for r in REQUESTS]
    # Unbounded slack: every request joins every step (what a GPU's step-cost model decides).
    engine = Engine(model, step_slack=float("inf"))
    futures = []
    for r in REQUESTS:
        canvas = engine.canvas(r)
        futures.append(engine.scheduler.submit(lambda c=canvas: BlockwiseRun(model, c, SLOW), lambda: False))
    got = [engine.decode_slots(f.result(timeout=120).canvas.widths, f.result().span_ids, None) for f in futures]
    assert got == want
    stats = engine.scheduler.stats()
    assert stats["largestBatch"] == 3, stats
    assert stats["forwardPasses"] < stats["requestSteps"], stats
    # And through `infill` from three threads (the server's path).
    assert infill_together(Engine(model, step_slack=float("inf")), REQUESTS, SLOW) == want


def test_cancelled_block_requests_leave_at_a_step_boundary_and_the_others_finish(block_models):
    model = block_models["sdar"]
    want = [Engine(model, batching=False).infill(r, SLOW).candidates for r in REQUESTS]
    engine = Engine(model, step_slack=float("inf"))
    waiting, midway = CancelToken(), CancelToken()
    waiting.cancel()                          # gone before its first step: its context never ran
    seen: list[int] = []

    def on_step(state) -> None:
        seen.append(state.step)
        if state.step == 2:
            midway.cancel()

    results: dict = {}

    def client(i: int, cancel, callback) -> None:
        try:
            results[i] = engine.infill(REQUESTS[i], SLOW, cancel, callback).candidates
        except Cancelled:
            results[i] = "cancelled"

    threads = [threading.Thread(target=client, args=args)
               for args in ((0, midway, on_step), (1, waiting, None), (2, None, None))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == {0: "cancelled", 1: "cancelled", 2: want[2]}
    assert max(seen) == 2                     # no step after the one that cancelled it
    assert engine.scheduler.stats()["droppedBeforeStart"] == 1


def test_a_block_models_context_counts_as_context_work(block_models):
    model = block_models["stable-diffcoder"]
    before = model.context_stats()
    Engine(model).infill(REQUESTS[2], DecodeSettings(steps=2))
    after = model.context_stats()
    assert after["sessions"] == before["sessions"] + 1
    assert after["tokens"] - before["tokens"] >= len(model.encode("import os\n" * 6)) - model.block_size
    assert after["seconds"] > before["seconds"]

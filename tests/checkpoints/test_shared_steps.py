"""The open checkpoints' shared step (`CheckpointDenoiser.batch_logits`): several requests'
cached steps in one pass give each request the logits its own step gives it; a request due a
full pass takes it alone."""
import pytest
import torch

from dllm_lsp.engine.denoiser import Canvas
from dllm_lsp.engine.types import CacheSettings

BATCHES = (1, 2, 1)


def canvases(denoiser) -> list[Canvas]:
    """Three canvases of different lengths, one slot or two, a slot at the very start."""
    gen = torch.Generator().manual_seed(7)
    mask = denoiser.special.mask_id
    out = []
    for length, slots in ((40, [(8, 14), (25, 31)]), (23, [(0, 5)]), (57, [(30, 42)])):
        ids = torch.randint(0, denoiser.vocab_limit, (length,), generator=gen)
        ids[ids == mask] = 0
        for a, b in slots:
            ids[a:b] = mask
        out.append(Canvas(ids, slots))
    return out


def sessions_after_one_step(denoiser, cache=CacheSettings()):
    """Each request's session after its first (full) step, and the canvases it now holds
    (a few slot tokens committed, as a step would)."""
    sessions, ids = [], []
    for canvas, batch in zip(canvases(denoiser), BATCHES):
        session = denoiser.session(canvas, batch, cache)
        rows = canvas.ids[None].repeat(batch, 1)
        session.logits(rows)
        for b in range(batch):
            rows[b, canvas.span_positions()[: 2 + b]] = torch.tensor([11 + b, 12, 13, 14][: 2 + b])
        sessions.append(session)
        ids.append(rows)
    return sessions, ids


@pytest.mark.parametrize("layout", ["llada", "dream", "open-dcoder", "llada-moe", "coda"])
def test_a_shared_cached_step_gives_each_request_its_own_logits(layout, loaded, loaded_bidirectional_blocks):
    denoiser = {**loaded, **loaded_bidirectional_blocks}[layout]
    shared, ids = sessions_after_one_step(denoiser)
    alone, _ = sessions_after_one_step(denoiser)
    # One request wants the LM head only for some rows (those still undecided).
    rows = [None, torch.tensor([[False, False, True, True, True], [False, True, False, False, True]]), None]
    got = denoiser.batch_logits(shared, ids, rows)
    assert got is not None and len(got) == 3
    for session, own, canvas_ids, want_rows, logits in zip(alone, shared, ids, rows, got):
        want = session.logits(canvas_ids, want_rows)
        assert logits.shape == want.shape
        torch.testing.assert_close(logits, want, atol=1e-4, rtol=1e-4)
        assert own.steps == session.steps == 2 and own.full_passes == 1   # a cached step, counted


def test_the_shared_step_runs_the_triton_kernels_too(loaded, monkeypatch):
    monkeypatch.setenv("DLLM_LSP_KERNELS", "triton")   # span attention and rope in the interpreter
    denoiser = loaded["dream"]
    shared, ids = sessions_after_one_step(denoiser)
    alone, _ = sessions_after_one_step(denoiser)
    for session, canvas_ids, logits in zip(alone, ids, denoiser.batch_logits(shared, ids)):
        torch.testing.assert_close(logits, session.logits(canvas_ids), atol=1e-4, rtol=1e-4)


def test_a_request_due_a_full_pass_takes_it_alone(loaded):
    denoiser = loaded["dream"]
    refreshing = CacheSettings(mode="dual", refresh_every=2)
    shared, ids = sessions_after_one_step(denoiser, refreshing)
    alone, _ = sessions_after_one_step(denoiser, refreshing)
    fresh = [denoiser.session(c, b) for c, b in zip(canvases(denoiser), BATCHES)]
    fresh_alone = [denoiser.session(c, b) for c, b in zip(canvases(denoiser), BATCHES)]
    fresh_ids = [c.ids[None].repeat(b, 1) for c, b in zip(canvases(denoiser), BATCHES)]
    # Step 2 of the refreshing sessions is cached, step 3 a refresh (every 2); the new ones' first.
    for _ in range(2):
        got = denoiser.batch_logits(shared + fresh, ids + fresh_ids)
        want = [s.logits(i) for s, i in zip(alone + fresh_alone, ids + fresh_ids)]
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)
    assert [s.full_passes for s in shared] == [2, 2, 2]
    assert [s.full_passes for s in fresh] == [1, 1, 1]
    assert [s.steps for s in shared + fresh] == [3, 3, 3, 2, 2, 2]


def test_without_a_cache_every_step_is_a_full_pass_alone(loaded):
    denoiser = loaded["llada"]
    exact = CacheSettings(mode="none")
    shared, ids = sessions_after_one_step(denoiser, exact)
    alone, _ = sessions_after_one_step(denoiser, exact)
    for g, s, i in zip(denoiser.batch_logits(shared, ids), alone, ids):
        torch.testing.assert_close(g, s.logits(i), atol=1e-5, rtol=1e-5)
    assert [s.full_passes for s in shared] == [2, 2, 2]


def test_the_first_pass_runs_when_the_engine_opens_the_session(loaded):
    """`open_session` (what the engine's loops call) runs the first step's full pass: the first
    step is then the LM head alone, shared with the others, and the pass counts as context work."""
    denoiser = loaded["dream"]
    before = denoiser.context_stats()
    opened = [denoiser.open_session(c, b) for c, b in zip(canvases(denoiser), BATCHES)]
    assert [s.full_passes for s in opened] == [1, 1, 1]
    assert not any(s.refresh_due() for s in opened)
    after = denoiser.context_stats()
    assert after["sessions"] == before["sessions"] + 3 and after["seconds"] > before["seconds"]
    plain = [denoiser.session(c, b) for c, b in zip(canvases(denoiser), BATCHES)]
    ids = [c.ids[None].repeat(b, 1) for c, b in zip(canvases(denoiser), BATCHES)]
    for got, session, canvas_ids in zip(denoiser.batch_logits(opened, ids), plain, ids):
        torch.testing.assert_close(got, session.logits(canvas_ids), atol=1e-4, rtol=1e-4)
    assert [(s.full_passes, s.steps) for s in opened] == [(1, 1)] * 3


def test_a_first_step_over_other_ids_runs_its_own_pass(loaded):
    denoiser = loaded["llada"]
    canvas = canvases(denoiser)[0]
    opened, plain = denoiser.open_session(canvas, 1), denoiser.session(canvas, 1)
    changed = canvas.ids[None].clone()
    changed[0, canvas.span_positions()[:2]] = torch.tensor([11, 12])
    torch.testing.assert_close(opened.logits(changed), plain.logits(changed))
    assert opened.full_passes == 2 and opened.steps == 1

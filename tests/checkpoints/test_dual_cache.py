"""The Fast-dLLM dual cache: exact where it must be, cheaper, and configurable."""
import pytest
import torch

from dllm_lsp.engine.types import CacheSettings
from dllm_lsp.engine.denoiser import Canvas
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest


def two_slot_canvas(denoiser, length=40):
    ids = torch.randint(0, denoiser.vocab_limit, (length,))
    mask = denoiser.special.mask_id
    ids[ids == mask] = 0
    ids[8:14] = mask
    ids[25:31] = mask
    return Canvas(ids, [(8, 14), (25, 31)])


@pytest.mark.parametrize("layout", ["llada", "dream"])
def test_cached_step_equals_exact_when_span_unchanged(layout, loaded):
    """With the span as it was at the cached pass, the cached path must reproduce the full pass."""
    denoiser = loaded[layout]
    canvas = two_slot_canvas(denoiser)
    session = denoiser.session(canvas, 2)
    ids = canvas.ids[None].repeat(2, 1)
    first = session.logits(ids)          # full pass, fills the cache
    second = session.logits(ids)         # active rows only, against the cache
    assert session.full_passes == 1
    assert torch.allclose(first, second, atol=1e-4)


@pytest.mark.parametrize("layout", ["llada", "dream"])
def test_cache_is_approximate_after_the_span_changes(layout, loaded):
    denoiser = loaded[layout]
    canvas = two_slot_canvas(denoiser)
    cached = denoiser.session(canvas, 1)
    cached.logits(canvas.ids[None])
    changed = canvas.ids.clone()
    changed[8:11] = torch.tensor([5, 6, 7])
    approx = cached.logits(changed[None])
    exact = denoiser.session(canvas, 1, CacheSettings("none")).logits(changed[None])
    finite = torch.isfinite(exact)
    gap = (approx[finite] - exact[finite]).abs().max().item()
    assert 0 < gap < 5.0        # close, not identical: the context K/V came from the masked span


def test_refresh_interval_and_uncached_mode_count_full_passes(loaded):
    denoiser = loaded["dream"]
    canvas = two_slot_canvas(denoiser)
    for settings, passes in ((CacheSettings("dual", 0), 1), (CacheSettings("dual", 2), 3), (CacheSettings("none"), 6)):
        session = denoiser.session(canvas, 1, settings)
        for _ in range(6):
            session.logits(canvas.ids[None])
        assert session.full_passes == passes, settings


def test_bad_cache_settings_are_refused():
    with pytest.raises(ValueError, match="cache mode"):
        CacheSettings("sometimes")
    with pytest.raises(ValueError, match="refresh_every"):
        CacheSettings("dual", -1)


@pytest.mark.parametrize("layout", ["llada", "dream", "open-dcoder"])
def test_engine_fills_with_and_without_cache(layout, loaded):
    denoiser = loaded[layout]
    engine = Engine(denoiser)
    request = InfillRequest.single("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", 10)
    results = {}
    for mode in ("dual", "none"):
        # a per-request option: the shared engine and model are not reconfigured
        results[mode] = engine.infill(request, DecodeSettings(steps=5, threshold=0.5), cache=CacheSettings(mode))
    for result in results.values():
        assert 1 <= result.steps <= 5
        assert isinstance(result.text, str)
    assert denoiser.last_session.full_passes == results["none"].steps


def test_triton_kernels_through_the_model_match_the_reference(loaded, monkeypatch):
    """The GPU path (fused RMSNorm, RoPE, span attention kernels), run by Triton's CPU interpreter.

    On the Dream layout: GQA, q/k/v biases, and the fused q/k/v projection's strided views."""
    denoiser = loaded["dream"]
    canvas = two_slot_canvas(denoiser, length=36)
    ids = canvas.ids[None]
    changed = ids.clone()
    changed[0, 8:10] = torch.tensor([5, 6])
    out = {}
    for mode in ("reference", "triton"):
        monkeypatch.setenv("DLLM_LSP_KERNELS", mode)
        session = denoiser.session(canvas, 1)
        out[mode] = (session.logits(ids), session.logits(changed))
    for ref, tri in zip(out["reference"], out["triton"]):
        finite = torch.isfinite(ref)
        assert torch.equal(finite, torch.isfinite(tri))
        assert (ref[finite] - tri[finite]).abs().max().item() < 1e-3

"""Cache mode "reuse": an open checkpoint keeps a canvas's context keys/values across requests,
and the next keystroke's first pass computes only what changed."""
import pytest
import torch

from dllm_lsp.checkpoints.context_store import ContextEntry, ContextStore
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import CacheSettings, DecodeSettings, InfillRequest
from dllm_lsp.kernels.rope import apply_rotary

REUSE, DUAL = CacheSettings("reuse"), CacheSettings("dual")
SOURCE = "\n".join(f"def f{i}(x):\n    return x * {i} + len(str(x))\n" for i in range(40))


def request(typed: str = "", cut: int = 1500) -> InfillRequest:
    return InfillRequest.single(SOURCE[:cut] + typed, SOURCE[cut:cut + 900], 12)


@pytest.fixture
def reusing(loaded, loaded_bidirectional_blocks):
    """(denoiser, engine) of a family with an empty context store of its own; the loaded
    model's store comes back afterwards (the `loaded` models are shared by the session)."""
    models = {**loaded, **loaded_bidirectional_blocks}
    saved = {layout: d.context_store for layout, d in models.items()}

    def make(layout: str, **store):
        denoiser = models[layout]
        denoiser.context_store = ContextStore(**store)
        return denoiser, Engine(denoiser, batching=False)

    yield make
    for layout, store in saved.items():
        models[layout].context_store = store


def first_pass(denoiser, canvas, cache=REUSE):
    session = denoiser.session(canvas, 1, cache)
    session.logits(canvas.ids[None])
    return session


def finite_max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    keep = torch.isfinite(b)
    return float((a - b)[keep].abs().max())


def test_rotating_a_key_moves_it_exactly(loaded):
    """The suffix's kept keys are moved by rotating them: R(p + d) = R(d) R(p)."""
    model = loaded["dream"].model
    attn = model.layers[0].attn
    x = torch.randn(1, 5, model.cfg.dim)
    positions = torch.arange(100, 105)
    _, k_at, _ = attn.qkv(x, *model.cos_sin(positions))
    _, k_moved, _ = attn.qkv(x, *model.cos_sin(positions + 37))
    torch.testing.assert_close(apply_rotary(k_at, *model.cos_sin(torch.full((5,), 37))), k_moved,
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", ["dream", "llada", "llada-moe", "coda"])
def test_the_next_keystroke_keeps_all_but_the_typed_context(layout, reusing):
    denoiser, engine = reusing(layout)
    first_pass(denoiser, engine.canvas(request()))
    assert len(denoiser.context_store) == 1
    for typed in ("r", "re", "ret("):
        canvas = engine.canvas(request(typed))
        session = denoiser.session(canvas, 1, REUSE)
        reuse = session.reuse
        n_context = session.context_index.numel()
        # All the context but the typed tokens: the prefix before them, the whole suffix moved on.
        assert reuse is not None
        suffix = reuse.segments[-1]                       # the whole suffix, moved on ("re" may be one token)
        assert (suffix.new, suffix.length) == (session.split, n_context - session.split) and suffix.shift >= 0
        assert n_context - 3 <= session.reused_tokens <= n_context   # the token before the slot is a span row
        logits = session.logits(canvas.ids[None])
        assert session.full_passes == 1 and len(session.context_kv[0][0][0, 0]) == n_context
        exact = denoiser.session(canvas, 1, DUAL).logits(canvas.ids[None])
        # Approximate as the dual cache is (kept keys saw an older canvas), but close; and not
        # close by chance: without the move of the suffix's keys it is off more (next test).
        assert finite_max_diff(logits, exact) < 5e-3
        assert torch.equal(logits.argmax(-1), exact.argmax(-1))
    # Each keystroke's entry replaced the one it came from.
    assert len(denoiser.context_store) == 1 and denoiser.context_store.latest().generation == 3


def test_a_moved_suffix_is_required_for_the_closeness(reusing):
    """The counter-test of the bound above: the same reuse with the suffix's keys left where
    they were is far off (so the bound tests the move)."""
    denoiser, engine = reusing("dream")
    first_pass(denoiser, engine.canvas(request()))
    canvas = engine.canvas(request("r"))
    moved = denoiser.session(canvas, 1, REUSE)
    entry = denoiser.context_store.latest()
    shift = moved.reuse.segments[-1].shift
    assert shift > 0
    unmoved_entry = ContextEntry(entry.ids, entry.positions + shift * (torch.arange(entry.ids.numel()) >= entry.split),
                                 entry.split, entry.kv)
    denoiser.context_store = ContextStore()
    denoiser.context_store.keep(unmoved_entry)          # positions say "already there": no rotation
    unmoved = denoiser.session(canvas, 1, REUSE)
    assert unmoved.reuse.segments[-1].shift == 0 and unmoved.reused_tokens == moved.reused_tokens
    exact = denoiser.session(canvas, 1, DUAL).logits(canvas.ids[None])
    good = finite_max_diff(moved.logits(canvas.ids[None]), exact)
    bad = finite_max_diff(unmoved.logits(canvas.ids[None]), exact)
    assert bad > 2 * good


def test_an_unrelated_canvas_takes_a_full_pass(reusing):
    denoiser, engine = reusing("dream")
    first_pass(denoiser, engine.canvas(request()))
    other = engine.canvas(InfillRequest.single("import os\n" * 50, "print(1)\n" * 30, 8))
    session = first_pass(denoiser, other)
    assert session.reuse is None and session.reused_tokens == 0
    assert len(denoiser.context_store) == 2        # both kept (least recently used out at 8)
    # Typing on in each document finds its own context among the kept ones.
    for typed in (InfillRequest.single("import os\n" * 50 + "x", "print(1)\n" * 30, 8), request("r")):
        canvas = engine.canvas(typed)
        session = denoiser.session(canvas, 1, REUSE)
        assert session.reused_tokens >= session.context_index.numel() - 2
        assert session.reuse.entry is denoiser.context_store.latest()     # now the most recently used


def test_staleness_is_bounded_by_generations(reusing):
    denoiser, engine = reusing("llada", max_generations=2)
    typed = ""
    reused = []
    for ch in "abcd":
        reused.append(first_pass(denoiser, engine.canvas(request(typed))).reused_tokens > 0)
        typed += ch
    # A full pass, two reuses, then a full pass again (the chain was two reuses old).
    assert reused == [False, True, True, False]


def test_the_dual_mode_keeps_nothing_and_an_entryless_store_reuses_nothing(reusing):
    denoiser, engine = reusing("dream")
    canvas = engine.canvas(request())
    first_pass(denoiser, canvas, DUAL)
    assert len(denoiser.context_store) == 0
    denoiser.prefix_cache_entries = 0                    # `serve --prefix-cache 0`
    first_pass(denoiser, canvas)
    assert len(denoiser.context_store) == 0


def test_typing_through_the_engine_reuses_and_counts_it(reusing):
    denoiser, _ = reusing("dream")
    engine = Engine(denoiser)                            # the step scheduler
    settings = DecodeSettings(steps=4)
    before = denoiser.context_stats()
    for typed in ("", "r", "re"):
        result = engine.infill(request(typed), settings, cache=REUSE)
        assert result.candidates
    after = denoiser.context_stats()
    assert after["sessions"] - before["sessions"] == 3
    tokens = after["tokens"] - before["tokens"]
    assert after["reusedTokens"] - before["reusedTokens"] > 0.6 * tokens   # two of three keystrokes kept ~all


def test_a_prefix_window_that_moved_is_reused_moved_back(reusing):
    """A long prefix is cut from its start in 16-token steps as the cursor moves on: the rest of
    it is found further on in the kept canvas and its keys moved back."""
    denoiser, _ = reusing("llada")
    engine = Engine(denoiser, batching=False, context_tokens=256)
    long = SOURCE * 3
    cut = len(long) // 2
    first_pass(denoiser, engine.canvas(InfillRequest.single(long[:cut], long[cut:cut + 300], 8)))
    typed = "value = compute(alpha, beta, gamma) + other(delta, epsilon)\n    "
    canvas = engine.canvas(InfillRequest.single(long[:cut] + typed, long[cut:cut + 300], 8))
    session = denoiser.session(canvas, 1, REUSE)
    n_context = session.context_index.numel()
    moved_back = [seg for seg in session.reuse.segments if seg.shift < 0]
    assert moved_back and moved_back[0].length > 100
    # All but the typed tokens (and the start the window no longer holds) came from the kept canvas.
    assert session.reused_tokens >= n_context - len(denoiser.encode(typed)) - 2
    logits = session.logits(canvas.ids[None])
    exact = denoiser.session(canvas, 1, DUAL).logits(canvas.ids[None])
    # A larger approximation than a keystroke's (the kept keys saw 48 tokens the window no longer
    # holds and not the 49 typed ones), bounded looser than a keystroke's.
    assert finite_max_diff(logits, exact) < 0.1
    assert torch.equal(logits.argmax(-1), exact.argmax(-1))


def test_a_reusing_first_pass_shares_a_step_and_gets_what_it_gets_alone(reusing):
    """The first pass of a keystroke in mode "reuse" is as few rows as a cached step: it joins
    the shared pass of other requests' cached steps (one pass for both), with the logits and
    the context cache it gets alone, and its context tokens count as context work."""
    denoiser, engine = reusing("dream")
    first_pass(denoiser, engine.canvas(request()))             # the canvas before the keystroke, kept
    typed = engine.canvas(request("r"))
    alone, shared = denoiser.session(typed, 1, REUSE), denoiser.session(typed, 1, REUSE)
    assert alone.reuse is not None and shared.reuse is not None and shared.reusing_pass_due()
    fresh = shared.context_index.numel() - shared.reused_tokens
    assert denoiser.pending_rows(shared) == fresh > 0           # the step scheduler counts them
    other_canvas = engine.canvas(request(cut=600))
    other_ids = other_canvas.ids[None].repeat(2, 1)
    other, other_alone = (denoiser.session(other_canvas, 2, DUAL) for _ in range(2))
    for session in (other, other_alone):
        session.logits(other_ids)                               # their first (full) pass: the next step is cached
    want, other_want = alone.logits(typed.ids[None]), other_alone.logits(other_ids)
    passes = []
    hook = denoiser.model.embed.register_forward_hook(lambda *_: passes.append(1))
    before = denoiser.context_stats()["seconds"]
    try:
        got, other_got = denoiser.batch_logits([shared, other], [typed.ids[None], other_ids])
    finally:
        hook.remove()
    assert len(passes) == 1                                     # one pass for both requests
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(other_got, other_want, atol=1e-4, rtol=1e-4)
    assert (shared.full_passes, shared.steps, other.steps) == (1, 1, 2)
    assert denoiser.pending_rows(shared) == 0 == denoiser.pending_rows(other)
    for (k, v), (k_alone, v_alone) in zip(shared.context_kv, alone.context_kv):
        torch.testing.assert_close(k, k_alone, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(v, v_alone, atol=1e-4, rtol=1e-4)
    assert denoiser.context_stats()["seconds"] > before

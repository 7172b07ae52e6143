"""DreamOn's expand / delete rules (its reference sampler), on the tiny DreamOn folder."""
import torch

from dllm_lsp.engine.denoise import run_alone
from dllm_lsp.engine.engine import RUNS, Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.engine.variable_length import (
    INITIAL_MASKS,
    Layout,
    apply_resizes,
    initial_layout,
    VariableLengthRun,
    no_expansion,
)
from dllm_lsp.loader import load_model


def dreamon(tiny_checkpoints):
    model = load_model(str(tiny_checkpoints["dreamon"]), "cpu")
    assert model.decoding == "variable_length"     # the engine picks the expand/delete loop for it
    assert RUNS[model.decoding] is VariableLengthRun
    return model


def steer(denoiser, token: int) -> None:
    """Edit the weights so the model predicts `token` everywhere (a model that always wants to expand/delete)."""
    m = denoiser.model
    with torch.no_grad():
        m.embed.weight[:, 0] = 1000.0          # hidden dim 0 dominates after the final RMSNorm...
        m.lm_head.weight[:, 0] = 0.0
        m.lm_head.weight[token, 0] = 60.0      # ...and only `token` reads it


def test_canvas_layout_follows_the_reference(tiny_checkpoints):
    d = dreamon(tiny_checkpoints)
    canvas = Engine(d).canvas(InfillRequest.single("x = ", "\nprint(x)\n", 20))
    layout = initial_layout(canvas, d.special)
    ids = layout.canvas().ids.tolist()
    assert ids[0] == d.special.bos_id and ids[-1] == d.special.eos_id       # [BOS] prefix ... suffix [EOS]
    assert layout.slots == [[d.special.mask_id] * INITIAL_MASKS] and layout.widths == [20]


def test_delete_removes_the_position_and_every_mask_after_it(tiny_checkpoints):
    d = dreamon(tiny_checkpoints)
    m, eos, a, b = d.special.mask_id, d.special.eos_id, 5, 6
    layout = Layout([[1], [2]], [[a, m, m, b, m]], [8])
    resized = apply_resizes(layout, [a, eos, m, b, m], [False, True, False, False, False], d.special)
    assert resized and layout.slots == [[a, b]]


def test_expand_turns_a_position_into_two_masks_within_the_width(tiny_checkpoints):
    d = dreamon(tiny_checkpoints)
    m, x = d.special.mask_id, d.special.expand_id
    layout = Layout([[1], [2]], [[m, m, m]], [5])
    apply_resizes(layout, [x, x, x], [True, True, True], d.special)
    assert layout.slots == [[m, m, m, m, m]]    # room for two expansions; the third position is re-opened
    full = Layout([[1], [2]], [[m, m]], [2])
    apply_resizes(full, [x, m], [True, False], d.special)
    assert full.slots == [[m, m]]


def test_expansion_is_blocked_when_full_and_at_the_last_step(tiny_checkpoints):
    d = dreamon(tiny_checkpoints)
    m = d.special.mask_id
    layout = Layout([[1], [2], [3]], [[m, m], [m, m]], [2, 6])
    assert no_expansion(layout, steps_left=3).tolist() == [True, True, False, False]
    assert no_expansion(layout, steps_left=1).all()


def test_a_model_that_expands_grows_the_slot_to_its_width(tiny_checkpoints):
    d = dreamon(tiny_checkpoints)
    steer(d, d.special.expand_id)
    engine = Engine(d)
    request = InfillRequest.single("def f():\n    ", "\n", 14)
    result = engine.infill(request, DecodeSettings(steps=6, threshold=0.5))
    assert result.steps <= 6
    # 8 initial masks grew to the slot's 14 tokens, and nothing is left as an expand token.
    canvas = engine.canvas(request)
    # The loop alone (no engine around it), to read its canvas.
    final = run_alone(lambda: VariableLengthRun(d, canvas, DecodeSettings(steps=6, threshold=0.5)), lambda: False)
    (start, end), = final.canvas.slot_ranges
    assert end - start == 14
    assert d.special.expand_id not in final.span_ids.tolist()[0]
    assert d.special.mask_id not in final.span_ids.tolist()[0]


def test_a_model_that_deletes_returns_an_empty_span(tiny_checkpoints):
    d = dreamon(tiny_checkpoints)
    steer(d, d.special.eos_id)
    result = Engine(d).infill(InfillRequest.single("x = 1", "\n", 12), DecodeSettings(steps=4))
    assert result.text == "" and result.tokens_committed == 0 and result.steps == 1


def test_candidates_and_streaming(tiny_checkpoints):
    d = dreamon(tiny_checkpoints)
    states = []
    result = Engine(d).infill(InfillRequest.single("def add(a, b):\n    return ", "\n", 10),
                              DecodeSettings(steps=4, n=2, temperature=0.8, threshold=0.5), on_step=states.append)
    assert len(result.candidates) == 2 and all(len(c) == 1 for c in result.candidates)
    assert states and states[-1].masked_left == 0


def test_delete_token_comes_from_the_generation_config(tiny_checkpoints):
    import json

    d = dreamon(tiny_checkpoints)
    generation = json.loads((tiny_checkpoints["dreamon"] / "generation_config.json").read_text())
    assert d.special.delete_id == generation["delete_token_id"] == d.special.eos_id


def test_concurrent_dreamon_requests_share_steps_and_get_what_they_get_alone(tiny_checkpoints):
    """The variable-length loop runs through the step scheduler (VariableLengthRun): concurrent
    requests' cached steps share a pass, and each gets the completion it gets alone."""
    d = dreamon(tiny_checkpoints)
    requests = [InfillRequest.single("def f(x):\n    return ", "\n", 12), InfillRequest.single("a = [", "]\n", 10),
                InfillRequest.single("import os\n" * 5 + "p = os.path.", "\n", 9)]
    settings = DecodeSettings(steps=8, threshold=1.0)
    want = [Engine(d, batching=False).infill(r, settings).candidates for r in requests]
    engine = Engine(d, step_slack=float("inf"))
    futures = [engine.scheduler.submit(lambda c=engine.canvas(r): VariableLengthRun(d, c, settings), lambda: False)
               for r in requests]
    got = [engine.decode_slots(f.result(timeout=120).canvas.widths, f.result().span_ids, None) for f in futures]
    assert got == want
    stats = engine.scheduler.stats()
    assert stats["largestBatch"] == 3, stats
    assert stats["forwardPasses"] < stats["requestSteps"], stats

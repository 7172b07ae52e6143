import pytest
import torch

from dllm_lsp.arch.embedded import EmbeddedConfig, EmbeddedModel
from dllm_lsp.train.examples import IGNORE
from dllm_lsp.train.objective import ObjectiveOptions, diffusion_loss, late_pads, mask_spans


def batch(b=6, t=32):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 100, (b, t), generator=g)
    is_span = torch.zeros(b, t, dtype=torch.bool)
    is_span[:, 10:18] = True
    ids[:, 15:18] = 1   # pads at the end of each slot
    ar = torch.where(is_span, torch.full_like(ids, IGNORE), torch.roll(ids, -1, 1))
    return ids, is_span, ar


def test_masks_only_span_positions_and_at_least_one():
    ids, is_span, _ = batch(b=64)
    noisy, masked, t = mask_spans(ids, is_span, 0, 1e-3, torch.Generator().manual_seed(1))
    assert not masked[~is_span].any()
    assert masked.any(1).all()
    assert (noisy[masked] == 0).all() and (noisy[~masked] == ids[~masked]).all()
    # Stratified t: one draw per 1/B interval, so the ratios cover (0, 1].
    assert t.min() < 1 / 32 and t.max() > 1 - 1 / 32
    ratio = masked.sum(1).float() / is_span.sum(1)
    assert torch.corrcoef(torch.stack([ratio, t]))[0, 1] > 0.8


def test_only_pads_after_the_first_one_are_late():
    ids = torch.tensor([[5, 6, 1, 1, 1, 7, 1, 1, 9]])
    is_span = torch.tensor([[0, 1, 1, 1, 1, 0, 1, 1, 0]]).bool()
    assert late_pads(ids, is_span, 1).int().tolist() == [[0, 0, 0, 1, 1, 0, 0, 1, 0]]


@pytest.mark.parametrize("weighting,layout", [("masked_mean", "causal_context"), ("inv_t", "bidirectional")])
def test_loss_trains_a_tiny_model(weighting, layout):
    torch.manual_seed(0)
    model = EmbeddedModel(EmbeddedConfig(vocab_size=100, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=64,
                                         attention_layout=layout))
    ids, is_span, ar = batch()
    opts = ObjectiveOptions(weighting=weighting, ar_weight=0.5, ar_fraction=1.0)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = None
    for step in range(25):
        out = diffusion_loss(model, ids, is_span, ar, opts, torch.Generator().manual_seed(step % 2))
        assert torch.isfinite(out["loss"]) and set(out) == {"loss", "diffusion", "ar"}
        optim.zero_grad()
        out["loss"].backward()
        optim.step()
        first = first if first is not None else float(out["diffusion"])
    assert float(out["diffusion"]) < first * 0.7


def test_bad_weighting_is_refused():
    with pytest.raises(ValueError, match="weighting"):
        ObjectiveOptions(weighting="bogus")

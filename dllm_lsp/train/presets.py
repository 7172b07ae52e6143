"""Named model + training sizes. `cpu-small` is what two CPU cores can train in about an hour;
`gpu-30m` is the shipped-size target for one H100/H200 (about 32M parameters, under 64 MiB in bf16)."""
from __future__ import annotations

PRESETS: dict[str, dict] = {
    "tiny-test": dict(vocab_size=512, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128,
                      seq_len=128, max_slot=32, batch_size=4, lr=3e-3, warmup=10),
    "cpu-small": dict(vocab_size=8192, dim=192, n_layers=4, n_heads=4, n_kv_heads=4, ffn_dim=512,
                      seq_len=256, max_slot=48, batch_size=8, lr=3e-3, warmup=50),
    "gpu-30m": dict(vocab_size=16384, dim=512, n_layers=8, n_heads=8, n_kv_heads=4, ffn_dim=1408,
                    seq_len=1024, max_slot=96, batch_size=64, lr=1.5e-3, warmup=500),
}
MODEL_KEYS = ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim")


def preset(name: str) -> dict:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return dict(PRESETS[name])

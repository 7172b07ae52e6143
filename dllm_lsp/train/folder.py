"""Write and read a trained model folder: config.json, model.safetensors, tokenizer.json."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from dllm_lsp.arch.embedded import EmbeddedModel


def save_model_folder(model: EmbeddedModel, tokenizer_path: Path, folder: Path, dtype: torch.dtype = torch.bfloat16,
                      extra_config: dict | None = None) -> Path:
    """Atomically enough for a reader: weights go to a temporary name, then replace the old file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # The compiled wrapper (torch.compile) prefixes names with _orig_mod.: save the plain module's.
    plain = getattr(model, "_orig_mod", model)
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in plain.state_dict().items()}
    tmp = folder / "model.safetensors.tmp"
    save_file(state, str(tmp), metadata={"format": "pt"})
    tmp.replace(folder / "model.safetensors")
    if Path(tokenizer_path).resolve() != (folder / "tokenizer.json").resolve():
        shutil.copyfile(tokenizer_path, folder / "tokenizer.json")
    config = {**plain.cfg.to_json(), **(extra_config or {})}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder

"""Write and read a trained model folder: config.json, model.safetensors, tokenizer.json."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from dllm_lsp.arch.embedded import EmbeddedModel
from dllm_lsp.arch.weight_storage import save_weights


def save_model_folder(model: EmbeddedModel, tokenizer_path: Path, folder: Path, storage: str = "bfloat16",
                      extra_config: dict | None = None) -> Path:
    """Atomically enough for a reader: weights go to a temporary name, then replace the old file.

    `storage`: bfloat16, float32 or int8 (row-wise scales; see arch/weight_storage.py)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # The compiled wrapper (torch.compile) prefixes names with _orig_mod.: save the plain module's.
    plain = getattr(model, "_orig_mod", model)
    save_weights(plain.state_dict(), folder / "model.safetensors", storage)
    if Path(tokenizer_path).resolve() != (folder / "tokenizer.json").resolve():
        shutil.copyfile(tokenizer_path, folder / "tokenizer.json")
    config = {**plain.cfg.to_json(), **(extra_config or {})}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder

"""Write a trained model folder: config.json, model.safetensors, tokenizer.json, replaced whole
(whole_folder.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from dllm_lsp.arch.embedded import EmbeddedModel
from dllm_lsp.arch.weight_storage import save_weights

from .whole_folder import begin_next_version, fresh_path, fsync_tree, partial_folder, put_in_place


def save_model_folder(model: EmbeddedModel, tokenizer_path: Path, folder: Path, storage: str = "bfloat16",
                      extra_config: dict | None = None, extra_files: dict[str, str] | None = None) -> Path:
    """Write the whole folder beside itself (`.NAME.partial`), then rename it into place.

    It was rewritten in place, file by file: a kill, an interrupt or a full disk between two files
    (or inside the tokenizer or config copy) left weights of one save with another's config, or a
    truncated tokenizer.json or config.json, and the unattended GPU job ships what is there. Now a
    reader finds the old folder or the new one, whole. The folder's other files (its training log,
    an eval or card written beside the model) are carried over. Between the two renames the folder
    is briefly at `.NAME.old`; `recover_model_folder` (run by the next save and by `train`) puts
    it back if a kill lands there. Each file and the folder are synced to the disk before the
    rename and the parent after it: a power cut leaves the old folder or the new one, with data.

    `storage`: bfloat16, float32 or int8 (row-wise scales; see arch/weight_storage.py).
    `extra_files`: further text files of the folder (training.json), written with it."""
    folder = Path(folder)
    partial = partial_folder(folder)
    try:
        begin_next_version(folder)
        # The compiled wrapper (torch.compile) prefixes names with _orig_mod.: save the plain module's.
        plain = getattr(model, "_orig_mod", model)
        save_weights(plain.state_dict(), partial / "model.safetensors", storage)
        if Path(tokenizer_path).resolve() != (folder / "tokenizer.json").resolve():
            shutil.copyfile(tokenizer_path, fresh_path(partial / "tokenizer.json"))
        config = {**plain.cfg.to_json(), **(extra_config or {})}
        fresh_path(partial / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for name, text in (extra_files or {}).items():
            fresh_path(partial / name).write_text(text)
        fsync_tree(partial)      # the data on the disk before a rename can publish it
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)   # a full disk keeps no half folder taking its space
        raise
    put_in_place(partial, folder)
    return folder

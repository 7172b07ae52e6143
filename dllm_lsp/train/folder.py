"""Write and read a trained model folder: config.json, model.safetensors, tokenizer.json."""
from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

from dllm_lsp.arch.embedded import EmbeddedModel
from dllm_lsp.arch.weight_storage import save_weights


def partial_folder(folder: Path) -> Path:
    """Where the next version of `folder` is written before it replaces it."""
    return folder.parent / f".{folder.name}.partial"


def replaced_folder(folder: Path) -> Path:
    """Where the previous version of `folder` waits while the next one is renamed into place."""
    return folder.parent / f".{folder.name}.old"


def recover_model_folder(folder: Path) -> None:
    """Put back the previous version of `folder` when a save was killed between its two renames
    (the folder moved aside, the new one not yet in place), and drop a half-written next version."""
    folder = Path(folder)
    old = replaced_folder(folder)
    if not folder.exists() and old.is_dir():
        os.replace(old, folder)
        fsync_path(folder.parent)
    shutil.rmtree(partial_folder(folder), ignore_errors=True)


def fsync_path(path: Path) -> None:
    """Flush `path` (a file, or a folder's entries) to the disk. A rename is atomic but not
    durable: after a power cut the renamed files could be there and empty, their data never
    written back. A file system that cannot sync a folder (EINVAL) keeps its renames as it can."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if not (exc.errno == errno.EINVAL and os.path.isdir(path)):
            raise
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    """Every file of `folder`, then the folder (its entries): the files carried over by hard link
    included, which a crash before their own sync would leave as empty as the new ones."""
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            fsync_path(path)
    for path in sorted((p for p in folder.rglob("*") if p.is_dir()), reverse=True):
        fsync_path(path)
    fsync_path(folder)


def _link_or_copy(src: str, dst: str) -> None:
    # A hard link keeps the file's inode: the training log, open for appending, goes on writing
    # into the new folder. A file system without hard links gets a copy.
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _fresh(path: Path) -> Path:
    """`path`, unlinked first: it may be a hard link to the old folder's file, which writing in
    place would change under the folder that is still the good one."""
    path.unlink(missing_ok=True)
    return path


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
    folder.parent.mkdir(parents=True, exist_ok=True)
    recover_model_folder(folder)
    partial, old = partial_folder(folder), replaced_folder(folder)
    try:
        if folder.is_dir():
            shutil.copytree(folder, partial, copy_function=_link_or_copy)
        else:
            partial.mkdir()
        # The compiled wrapper (torch.compile) prefixes names with _orig_mod.: save the plain module's.
        plain = getattr(model, "_orig_mod", model)
        save_weights(plain.state_dict(), partial / "model.safetensors", storage)
        if Path(tokenizer_path).resolve() != (folder / "tokenizer.json").resolve():
            shutil.copyfile(tokenizer_path, _fresh(partial / "tokenizer.json"))
        config = {**plain.cfg.to_json(), **(extra_config or {})}
        _fresh(partial / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for name, text in (extra_files or {}).items():
            _fresh(partial / name).write_text(text)
        _fsync_tree(partial)     # the data on the disk before a rename can publish it
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)   # a full disk keeps no half folder taking its space
        raise
    if folder.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(folder, old)
    os.replace(partial, folder)
    fsync_path(folder.parent)    # the renames themselves: the parent's entries
    shutil.rmtree(old, ignore_errors=True)
    return folder

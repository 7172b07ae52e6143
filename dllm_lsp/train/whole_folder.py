"""Replace a folder whole: its next version written beside it (`.NAME.partial`), synced, then
renamed into place, so a reader finds the old folder or the new one. Model folders (folder.py)
and the corpus folder (corpus.py) are replaced this way. No torch here: the corpus builder's
worker processes (one per core) import this module, and torch would cost each its import."""
from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path


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


def fsync_tree(folder: Path) -> None:
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


def fresh_path(path: Path) -> Path:
    """`path`, unlinked first: it may be a hard link to the old folder's file, which writing in
    place would change under the folder that is still the good one."""
    path.unlink(missing_ok=True)
    return path


def begin_next_version(folder: Path, leave_out: frozenset[str] = frozenset()) -> Path:
    """Start the next version of `folder` beside it (`.NAME.partial`) and return where: a save
    killed between its two renames is recovered first, and the folder's files are carried over
    by hard link (a copy where links cannot be made), except the top-level names in `leave_out`,
    which the new version writes afresh. Written, it goes in with `put_in_place`."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    recover_model_folder(folder)
    partial = partial_folder(folder)
    if folder.is_dir():
        def skipped(where: str, names: list[str]) -> list[str]:
            return [name for name in names if name in leave_out] if Path(where) == folder else []
        shutil.copytree(folder, partial, copy_function=_link_or_copy, ignore=skipped)
    else:
        partial.mkdir()
    return partial


def put_in_place(partial: Path, folder: Path) -> None:
    """Rename `partial`, written and synced (`fsync_tree`), into `folder`'s place: the old version
    aside (`.NAME.old`), the new one in, the parent synced, the old one removed. A reader finds
    the old folder or the new one, whole; a kill between the two renames leaves the old one aside,
    which `recover_model_folder` puts back."""
    old = replaced_folder(folder)
    if folder.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(folder, old)
    os.replace(partial, folder)
    fsync_path(folder.parent)    # the renames themselves: the parent's entries
    shutil.rmtree(old, ignore_errors=True)

"""Pack what the GPU job made into at most 8 files of at most 16 MiB (what a lease brings back),
and unpack them into the repository on the other side.

Pack: a gzip'd tar of every file to commit, each stored under its destination in the
repository (models/NAME/..., docs/results/...), cut into parts of at most PART_BYTES, plus
manifest.json (the sha256 of every part, of the whole archive and of every file). When the
parts would be more than MAX_FILES - 1, the least needed files (logs first) are left out and
named in the manifest.

Unpack: checks every hash, then writes the files into the repository (only under models/ and
docs/); a model folder of the same name is replaced whole, but never a loadable one by a folder
that is not, and never over uncommitted work of the user's (unless forced).
"""
from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from dllm_lsp.arch.weight_storage import weight_shapes
from dllm_lsp.eval.results import samples_path
from dllm_lsp.loader import with_default
from dllm_lsp.train.whole_folder import recover_model_folder

PART_BYTES = 15 * 1024 * 1024
MAX_FILES = 8
ALLOWED_ROOTS = ("models", "docs")
REQUIRED = ("config.json", "model.safetensors", "tokenizer.json")   # a model folder is useless without these
# What goes home, most needed first: the model folder, the figures, the record of the run.
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "training.json", "MODEL_CARD.md",
               "loss-curve.png", "eval-single-line.json", "eval-random-span-light.json", "train_log.jsonl")


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def model_problem(folder: Path) -> str | None:
    """Why `folder` is not a loadable model folder (None: it is): a file of REQUIRED missing, a
    config that is not JSON, weights whose header does not read. A job killed while it copied or
    first saved its model leaves such a folder; brought home, it would replace a working one."""
    folder = Path(folder)
    missing = [name for name in REQUIRED if not (folder / name).is_file()]
    if missing:
        return f"no {', '.join(missing)}"
    try:
        if not isinstance(json.loads((folder / "config.json").read_text()), dict):
            return "config.json is not a JSON object"
        weight_shapes(folder / "model.safetensors")
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def model_entries(job_dir: Path, model_dir: Path) -> list[tuple[Path, str]]:
    """The model folder's files (and the corpus it was trained on), most needed first."""
    entries: list[tuple[Path, str]] = []
    name = model_dir.name
    # Every eval the job ran goes (those MODEL_FILES names first), each with its per-task samples
    # right after it (dllm_lsp.eval.results).
    evals = sorted(p.name for p in model_dir.glob("eval-*.json"))
    for file in (*MODEL_FILES, *(e for e in evals if e not in MODEL_FILES)):
        for path in (model_dir / file, *([samples_path(model_dir / file)] if file.startswith("eval-") else [])):
            if path.is_file():
                entries.append((path, f"models/{name}/{path.name}"))
    if (job_dir / "corpus" / "stats.json").is_file():
        entries.append((job_dir / "corpus" / "stats.json", f"models/{name}/corpus_stats.json"))
    return entries


def job_entries(job_dir: Path, model_dir: Path | None) -> list[tuple[Path, str]]:
    """(file on disk, destination in the repository), most needed first; no model files when
    `model_dir` is None."""
    entries: list[tuple[Path, str]] = []
    if model_dir is not None:
        entries += model_entries(Path(job_dir), Path(model_dir))
    for result in sorted((job_dir / "results").glob("*.json")) if (job_dir / "results").is_dir() else []:
        entries.append((result, f"docs/results/{result.name}"))
    for plot in sorted((job_dir / "results").glob("*.png")) if (job_dir / "results").is_dir() else []:
        entries.append((plot, f"docs/images/{plot.name}"))
    stamp = stamp_of(job_dir)
    for file, dest in (("check/cuda-check.json", "cuda-check.json"), ("job.json", "job.json"),
                       ("job-log.txt", "job-log.txt")):
        if (job_dir / file).is_file():
            entries.append((job_dir / file, f"docs/results/gpu-job/{stamp}/{dest}"))
    return entries


def stamp_of(job_dir: Path) -> str:
    try:
        started = json.loads((job_dir / "job.json").read_text())["started"]
    except (OSError, ValueError, KeyError):
        return "unknown"
    return started[:16].replace(":", "").replace("-", "").replace("T", "-")


def read_entries(entries: list[tuple[Path, str]]) -> tuple[list[tuple[str, bytes, float]], list[dict]]:
    """Each file's bytes, read once, so the archive and the manifest's hash are of the same bytes
    (a step still writing, a killed job's orphan, changed a file between the two: unpack refused
    the whole pack). What unpack would refuse stays out, named with its reason, instead of costing
    the pack: a name it does not accept (a backslash, a control character), a symlink (a tar
    member that is no file), a folder named like a result (a read error that left no pack)."""
    read: list[tuple[str, bytes, float]] = []
    refused: list[dict] = []
    for path, dest in entries:
        why = ("a name unpack does not accept" if not safe_dest(dest)
               else "a symbolic link" if path.is_symlink() else None if path.is_file() else "not a regular file")
        if why is None:
            try:
                read.append((dest, path.read_bytes(), path.stat().st_mtime))
                continue
            except OSError as exc:
                why = f"unreadable ({type(exc).__name__})"
        refused.append({"path": str(path), "why": why})
    return read, refused


def archive(entries: list[tuple[str, bytes, float]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as tar:
        for dest, data, mtime in entries:
            info = tarfile.TarInfo(dest)
            info.size, info.mode, info.mtime = len(data), 0o644, int(mtime)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def pack_job(job_dir: Path, model_dir: Path, pack_dir: Path, part_bytes: int = PART_BYTES,
             max_files: int = MAX_FILES, require_model: bool = False) -> dict:
    """Pack the job folder. `require_model`: leave the model folder out (named in the manifest's
    `model_left_out`) unless it loads (model_problem); the job and `wait`'s salvage ask for it."""
    job_dir, pack_dir = Path(job_dir), Path(pack_dir)
    # A trainer killed between its save's two renames left the folder aside (`.NAME.old`): put
    # back, it is the last whole save (train/folder.py).
    recover_model_folder(Path(model_dir))
    problem = model_problem(model_dir) if require_model and Path(model_dir).is_dir() else None
    entries, refused = read_entries(job_entries(job_dir, None if problem else Path(model_dir)))
    left_out: list[str] = []
    while True:
        data = archive(entries)
        parts = max(1, -(-len(data) // part_bytes))
        optional = [i for i, (dest, _, _) in enumerate(entries) if Path(dest).name not in REQUIRED]
        if parts <= max_files - 1 or not optional:
            break
        # Too big to bring home whole: leave out the least needed file and try again.
        dest, _, _ = entries.pop(optional[-1])
        left_out.append(dest)
    if parts > max_files - 1:
        raise ValueError(f"the job's results do not fit {max_files - 1} parts of {part_bytes} bytes "
                         "even without the optional files: store the weights smaller (int8) or train a smaller model")
    if pack_dir.exists():
        shutil.rmtree(pack_dir)
    pack_dir.mkdir(parents=True)
    manifest = {"archive_sha256": sha256_of(data), "archive_bytes": len(data), "parts": [], "left_out": left_out,
                "files": [{"dest": dest, "bytes": len(content), "sha256": sha256_of(content)}
                          for dest, content, _ in entries]}
    if refused:
        manifest["refused"] = refused
    if problem:
        manifest["model_left_out"] = f"{Path(model_dir).name}: {problem}"
    for i in range(parts):
        chunk = data[i * part_bytes:(i + 1) * part_bytes]
        name = f"part-{i:02d}.bin"
        (pack_dir / name).write_bytes(chunk)
        manifest["parts"].append({"name": name, "bytes": len(chunk), "sha256": sha256_of(chunk)})
    (pack_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def safe_dest(dest: object) -> bool:
    """A path the pack may write: relative, under models/NAME/ or docs/, no `..` or `.` parts."""
    if not isinstance(dest, str) or not dest or "\\" in dest or any(ord(c) < 32 or ord(c) == 127 for c in dest):
        return False
    parts = dest.split("/")
    if parts[0] not in ALLOWED_ROOTS or any(p in ("", ".", "..") for p in parts):
        return False
    return len(parts) >= (3 if parts[0] == "models" else 2)


def checked_manifest(manifest: object) -> dict:
    """The manifest, if it has the shape pack_job writes and every file goes where a pack may
    write; else ValueError. (A `dest` of models/../x once made unpack delete the whole checkout:
    the folder it replaces is models/NAME.)"""
    if not isinstance(manifest, dict):
        raise ValueError("not a JSON object")
    parts, files = manifest.get("parts"), manifest.get("files")
    if not isinstance(manifest.get("archive_sha256"), str) or not isinstance(parts, list) \
            or not isinstance(files, list):
        raise ValueError("it needs archive_sha256, parts and files")
    for part in parts:
        if not isinstance(part, dict) or not isinstance(part.get("sha256"), str) \
                or not isinstance(part.get("name"), str) or not re.fullmatch(r"part-\d+\.bin", part["name"]):
            raise ValueError(f"bad part entry {part!r}")
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or not safe_dest(entry.get("dest")):
            raise ValueError(f"refusing file entry {entry!r}: only files under models/NAME/ and docs/")
    return manifest


def uncommitted(repo: Path, paths: list[Path]) -> list[str]:
    """Those of `paths` (in git's words) that git has no copy of as they are: untracked, or changed
    since the last commit. Outside a git checkout nothing can be told: none."""
    if not paths:
        return []
    try:
        done = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "-z", "--untracked-files=all", "--",
                               *(str(path.relative_to(repo)) for path in paths)],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [entry[3:] for entry in done.stdout.split("\0") if len(entry) > 3]


def would_lose(repo: Path, unpacked: Path, expected: dict[str, str], model_folders: list[Path]) -> list[str]:
    """The user's work unpacking would destroy: files it overwrites with other bytes or deletes
    (the rest of a replaced model folder) that git does not hold as they are. Unpacking the same
    pack again loses nothing (the same bytes); a tracked, unchanged file is still in git."""
    touched = [repo / dest for dest in expected
               if (repo / dest).is_file() and (repo / dest).read_bytes() != (unpacked / dest).read_bytes()]
    for folder in model_folders:
        if (repo / folder).is_dir():
            touched += [path for path in sorted((repo / folder).rglob("*"))
                        if (path.is_file() or path.is_symlink()) and path.relative_to(repo).as_posix() not in expected]
    return uncommitted(repo, touched)


def unpack(pack_dir: Path, repo: Path, make_default: bool = False, force: bool = False) -> list[Path]:
    """Verify the parts and write their files into `repo`; returns the paths written. Refused,
    before anything is written: a pack whose model folder does not load in place of one that does,
    and (unless `force`) a pack that would overwrite or delete uncommitted work (would_lose)."""
    pack_dir, repo = Path(pack_dir), Path(repo)
    manifest_path = pack_dir / "manifest.json"
    if not manifest_path.is_file():
        raise ValueError(f"{pack_dir} has no manifest.json: not a GPU job pack")
    try:
        manifest = checked_manifest(json.loads(manifest_path.read_text()))
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{manifest_path} is not a GPU job manifest: {exc}") from None
    chunks = []
    for part in manifest["parts"]:
        path = pack_dir / part["name"]
        if not path.is_file():
            raise ValueError(f"{part['name']} is missing from {pack_dir}")
        chunk = path.read_bytes()
        if sha256_of(chunk) != part["sha256"]:
            raise ValueError(f"{part['name']} is corrupt (sha256 differs from the manifest)")
        chunks.append(chunk)
    data = b"".join(chunks)
    if sha256_of(data) != manifest["archive_sha256"]:
        raise ValueError("the joined archive's sha256 differs from the manifest")
    expected = {f["dest"]: f["sha256"] for f in manifest["files"]}
    model_folders = sorted({Path(*Path(d).parts[:2]) for d in expected if d.startswith("models/")})
    if make_default and len(model_folders) != 1:   # refused before anything is written
        raise ValueError("--make-default needs exactly one model folder in the pack")
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                for member in tar.getmembers():
                    parts = Path(member.name).parts
                    if not member.isfile() or not parts or parts[0] not in ALLOWED_ROOTS or ".." in parts:
                        raise ValueError(f"refusing archive member {member.name!r}: only files under models/ and docs/")
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise ValueError(f"the pack's archive cannot be read ({type(exc).__name__}: {exc})") from None
        for dest, digest in expected.items():
            if not (Path(tmp) / dest).is_file():
                raise ValueError(f"{dest} is in the manifest but not in the archive")
            if sha256_of((Path(tmp) / dest).read_bytes()) != digest:
                raise ValueError(f"{dest} differs from the manifest")
        for folder in model_folders:
            problem = model_problem(Path(tmp) / folder)
            if problem and (repo / folder).is_dir() and model_problem(repo / folder) is None:
                raise ValueError(f"the pack's {folder.as_posix()} is not a loadable model folder ({problem}): "
                                 f"refusing to replace the one in {repo} with it")
        lost = [] if force else would_lose(repo, Path(tmp), expected, model_folders)
        if lost:
            shown = ", ".join(lost[:10]) + (f" and {len(lost) - 10} more" if len(lost) > 10 else "")
            raise ValueError(f"unpacking would overwrite or delete uncommitted work in {repo}: {shown}; "
                             "commit or move it first, or pass --force")
        for folder in model_folders:
            target = repo / folder
            if target.exists():
                shutil.rmtree(target)   # the same model, continued: the new folder replaces it whole
        for dest in expected:
            target = repo / dest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(tmp) / dest, target)
            written.append(target)
    if make_default:
        # The default on GPUs: the CPU default stays until this model is measured fast enough
        # there too (models/DEFAULT, dllm_lsp/loader.py).
        marker = repo / "models" / "DEFAULT"
        marker.write_text(with_default(marker.read_text() if marker.is_file() else "", "cuda",
                                       model_folders[0].name))
        written.append(marker)
    return written

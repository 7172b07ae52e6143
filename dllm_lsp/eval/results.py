"""An eval's `--out` file: its figures in JSON, its per-task samples xz-compressed beside it.

The per-task records (task, completion, pass, reason, confidence) are most of an eval file's
bytes (about 170 KB a mode over HumanEval's 1033 single lines), every committed run repeats them,
and the whole repository has to travel to a GPU machine in 64 MiB. xz keeps them at about a
twentieth of that. So `NAME.json` keeps the figures and names its samples file, `NAME.samples.json.xz`
(`{mode: [sample, ...]}`), and `read_result` puts the samples back where they were.

`python -m dllm_lsp.eval.results split FILE...` moves the samples of files written before this
(inline, under `modes[m]["samples"]`) out the same way.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import sys
from pathlib import Path

# Each file written whole, then renamed onto its place: shared with the benchmarks' --out and plots.
from dllm_lsp.cli_errors import replace_whole


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in chunks (a model's weights need not fit in memory twice)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def weights_identity(folder: Path) -> dict:
    """What tells one model's weights from another's in an eval result: the folder's name, the
    sha256 of its weight files (`*.safetensors`) and of its config.json. One weights file's hash is
    the file's own (`sha256sum model.safetensors` checks it); several files' is the sha256 of their
    `sha256sum` lines, sorted by name. Results recorded only the folder's name, so two runs on
    different weights saved to the same folder (a model trained on) could not be told apart."""
    folder = Path(folder)
    files = {path.name: file_sha256(path) for path in sorted(folder.glob("*.safetensors")) if path.is_file()}
    if len(files) == 1:
        combined = next(iter(files.values()))
    elif files:
        combined = hashlib.sha256("".join(f"{digest}  {name}\n" for name, digest in files.items()).encode()).hexdigest()
    else:
        combined = None    # a checkpoint without safetensors (a .bin one): its config still says something
    config = folder / "config.json"
    return {"folder": folder.name, "sha256": combined, "files": files,
            "config_sha256": file_sha256(config) if config.is_file() else None}


def weights_label(result: dict) -> str:
    """`FOLDER weights sha256:0123456789ab` for a result that records its weights; a result
    written before they were recorded: `FOLDER (weights not recorded)`."""
    weights = result.get(WEIGHTS_KEY)
    if not isinstance(weights, dict) or not weights.get("sha256"):
        return f"{result.get('model', '?')} (weights not recorded)"
    return f"{weights.get('folder', result.get('model', '?'))} weights sha256:{weights['sha256'][:12]}"


WEIGHTS_KEY = "weights"
SAMPLES_SUFFIX = ".samples.json.xz"
SAMPLES_KEY = "samples_file"


def samples_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".json") + SAMPLES_SUFFIX)


def split(full: dict) -> tuple[dict, dict[str, list]]:
    """The result without its per-task samples, and the samples by mode."""
    modes = {mode: {k: v for k, v in report.items() if k != "samples"} for mode, report in full.get("modes", {}).items()}
    samples = {mode: report["samples"] for mode, report in full.get("modes", {}).items() if "samples" in report}
    return {**full, "modes": modes}, samples


def write_result(path: str | Path, full: dict) -> None:
    """Write `full` (modes with their samples) as the figures' JSON and, when there are samples,
    the samples file beside it; a samples file left by an earlier run of the same name goes.
    Each file is written whole beside its place and renamed onto it, the samples first and the
    JSON that names them last: a run stopped or failing while writing leaves the result that was
    there (a JSON written first had named samples that were never written, or were the last run's)."""
    path = Path(path)
    summary, samples = split(full)
    sidecar = samples_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if samples:
        summary = {**summary, SAMPLES_KEY: sidecar.name}
        # preset 6 is within a few per cent of 9 on these records, at a fraction of the memory.
        replace_whole(sidecar, lzma.compress(json.dumps(samples).encode(), preset=6))
        replace_whole(path, (json.dumps(summary, indent=1) + "\n").encode())
    else:
        replace_whole(path, (json.dumps(summary, indent=1) + "\n").encode())
        sidecar.unlink(missing_ok=True)


def read_result(path: str | Path) -> dict:
    """An eval result with every mode's samples in place, whichever way it was written."""
    path = Path(path)
    full = json.loads(path.read_text())
    name = full.pop(SAMPLES_KEY, None)
    if name is None:
        return full
    samples = json.loads(lzma.decompress((path.parent / name).read_bytes()))
    for mode, records in samples.items():
        full["modes"].setdefault(mode, {"mode": mode})["samples"] = records
    return full


def split_file(path: Path) -> int:
    """Move a result file's inline samples out; the bytes saved (0 when it had none)."""
    before = path.stat().st_size
    full = json.loads(path.read_text())
    if SAMPLES_KEY in full or not any("samples" in m for m in full.get("modes", {}).values()):
        return 0
    write_result(path, full)
    if read_result(path) != full:     # never lose a record: the split must read back as it was
        replace_whole(path, (json.dumps(full, indent=1) + "\n").encode())
        samples_path(path).unlink(missing_ok=True)
        raise ValueError(f"{path}: the split result does not read back the same; left as it was")
    return before - path.stat().st_size - samples_path(path).stat().st_size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dllm_lsp.eval.results",
                                 description="Move eval results' inline per-task samples into xz files beside them.")
    sub = ap.add_subparsers(dest="command", required=True)
    sp = sub.add_parser("split", help="split each FILE written with its samples inline")
    sp.add_argument("files", nargs="+", type=Path)
    a = ap.parse_args(argv)
    saved = 0
    for path in a.files:
        try:
            gained = split_file(path)
        except (OSError, ValueError) as e:     # ValueError covers a file that is not JSON
            print(f"{path}: {e}", file=sys.stderr)
            return 1
        saved += gained
        print(f"{path}: {'split, ' + str(gained) + ' bytes saved' if gained else 'nothing inline'}")
    print(f"{saved / 2**20:.2f} MiB saved in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())

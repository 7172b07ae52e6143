"""What every model loader shares: the error a bad folder raises, and reading its JSON files.

Below both `loader` (which picks the family) and `checkpoints` / `arch` (which load one), so the
family loaders can raise ModelLoadError without importing the dispatcher that calls them.
"""
from __future__ import annotations

import json
from pathlib import Path


class ModelLoadError(Exception):
    """The model folder is missing, incomplete, corrupt or of an unsupported family."""


def load_json_file(path: Path):
    """The parsed JSON in `path`; ModelLoadError naming the file when it is not valid JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path} is not valid JSON: {exc}") from exc
    except RecursionError:
        raise ModelLoadError(f"{path} is nested too deeply to be a model's JSON") from None


def check_weights_match(expected: dict[str, tuple[int, ...]], state: dict, folder: Path) -> None:
    """ModelLoadError, in one line, when the weights in `state` are not the tensors (names and
    shapes) that the model built from `folder`'s config.json expects: the first mismatching tensor
    is named, the rest counted (torch's own error lists every one, one line each)."""
    problems = []
    for name, shape in expected.items():
        if name not in state:
            problems.append(f"{name} {tuple(shape)} is missing from the weights")
        elif tuple(state[name].shape) != tuple(shape):
            problems.append(f"{name} is {tuple(state[name].shape)} in the weights but {tuple(shape)} by config.json")
    problems += [f"{name} in the weights is not in the model config.json describes"
                 for name in state if name not in expected]
    if problems:
        more = f" (and {len(problems) - 1} more mismatching tensors)" if len(problems) > 1 else ""
        raise ModelLoadError(f"could not load {folder}: its config.json does not match its weights: "
                             f"{problems[0]}{more}")


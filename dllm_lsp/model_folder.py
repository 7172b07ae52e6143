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

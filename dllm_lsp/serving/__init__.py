"""Serving beyond one machine on Ray Serve (the optional "ray" extra). `require_ray()` says in one
line what to install when it is missing, instead of an ImportError traceback."""
from __future__ import annotations

from importlib.util import find_spec

INSTALL_HINT = "Ray Serve is not installed: pip install \"dllm-lsp[ray]\" (or: pip install \"ray[serve]\")"


def require_ray() -> None:
    if find_spec("ray") is None or find_spec("ray.serve") is None:
        raise ImportError(INSTALL_HINT)

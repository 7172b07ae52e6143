"""Fixtures of the editor end-to-end tests: the model the real server loads, and the expected
completion, asked of the same server code through `dllm-lsp complete`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def editor_model(tmp_path_factory) -> Path:
    """DLLM_EDITOR_TEST_MODEL (a model folder, e.g. for nicer screenshots), else a tiny random one."""
    chosen = os.environ.get("DLLM_EDITOR_TEST_MODEL")
    if chosen:
        return Path(chosen)
    from dllm_lsp.arch.tiny import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("editor-model") / "tiny")


def server_completion(model: Path, text: str, line: int, col: int, suffix: str = ".txt") -> dict:
    """What the server completes at 0-based (line, col) of `text` (dllm-lsp complete --json)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"expected{suffix}"
        path.write_text(text, encoding="utf-8")
        out = subprocess.run(
            [sys.executable, "-m", "dllm_lsp", "complete", f"{path}:{line + 1}:{col + 1}",
             "--model", str(model), "--device", "cpu", "--json"],
            capture_output=True, text=True, timeout=180,
        )
    assert out.returncode == 0, f"dllm-lsp complete failed: {out.stderr[-2000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])

"""The generated VS Code settings keep the extension's own keys and the options, nothing else: a
renamed option's old key (dllm.healTypedWord) stayed in package.json for good, offered in the
Settings UI and read by nobody."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from dllm_lsp.options import BY_WIRE, EDITOR_SETTINGS, written_files

REPO = Path(__file__).resolve().parents[2]
FILES = ("editors/vscode/package.json", "editors/vscode/src/settings.ts", "docs/protocol.md")


def test_a_stray_dllm_setting_is_dropped_and_the_extensions_own_are_kept(tmp_path):
    for name in FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / name, tmp_path / name)
    package = tmp_path / FILES[0]
    data = json.loads(package.read_text(encoding="utf-8"))
    properties = data["contributes"]["configuration"]["properties"]
    properties["dllm.healTypedWord"] = {"type": "boolean", "default": True, "description": "renamed since"}
    package.write_text(json.dumps(data), encoding="utf-8")

    written = json.loads(written_files(tmp_path)[package])["contributes"]["configuration"]["properties"]
    assert "dllm.healTypedWord" not in written
    keys = {k.removeprefix("dllm.") for k in written}
    assert {"enabled", "streaming", "server.token", "server.command"} <= keys
    assert all(k in BY_WIRE or k.split(".")[0] in EDITOR_SETTINGS for k in keys), keys

"""A model folder's save is durable, not only atomic: every file of the next version (the ones
carried over by hard link too) and its folder are synced to the disk before the rename that
publishes it, and the parent folder after it. Unsynced, a power cut could leave the renamed folder
with empty files, the old one already gone.

The system calls are the real ones, read with strace from a child process that saves a folder."""
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def traced_save(tmp_path: Path) -> tuple[Path, list[str]]:
    folder = tmp_path / "model"
    code = textwrap.dedent(f"""
        from pathlib import Path
        from dllm_lsp.arch.embedded import EmbeddedConfig, EmbeddedModel
        from dllm_lsp.arch.tiny import write_tiny_model
        from dllm_lsp.train.folder import save_model_folder

        source = write_tiny_model(Path({str(tmp_path / 'tiny')!r}))
        model = EmbeddedModel(EmbeddedConfig.load(source))
        folder = Path({str(folder)!r})
        save_model_folder(model, source / "tokenizer.json", folder, extra_files={{"training.json": "{{}}\\n"}})
        (folder / "eval-single-line.json").write_text("{{}}\\n")    # carried over by the next save
        print("SECOND SAVE", flush=True)
        save_model_folder(model, source / "tokenizer.json", folder, "int8", extra_files={{"training.json": "{{}}\\n"}})
    """)
    log = tmp_path / "strace.log"
    run = subprocess.run(["strace", "-f", "-y", "-qq", "-o", str(log), "-e", "trace=fsync,rename,renameat,renameat2,write",
                          sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    if run.returncode != 0 and "ptrace" in run.stderr:
        pytest.skip(f"strace cannot trace here: {run.stderr.strip()[:200]}")
    assert run.returncode == 0, run.stderr[-3000:]
    lines = log.read_text().splitlines()
    # The second save's calls: after the marker line was written to stdout.
    start = next(i for i, line in enumerate(lines) if "SECOND SAVE" in line)
    return folder, [line for line in lines[start:] if "fsync(" in line or "rename" in line]


# .ci/editors-setup.sh installs strace; under CI a missing strace fails here rather than skipping.
@pytest.mark.skipif(shutil.which("strace") is None and os.environ.get("CI") != "true", reason="strace is not installed")
@pytest.mark.timeout(300)
def test_the_next_version_is_synced_before_its_rename_and_the_parent_after(tmp_path):
    folder, calls = traced_save(tmp_path)
    partial = f"{folder.parent}/.{folder.name}.partial"
    publish = next(i for i, call in enumerate(calls)
                   if re.search(rf'rename\w*\(.*"{re.escape(partial)}".*"{re.escape(str(folder))}"', call))
    synced_before = {m.group(1) for call in calls[:publish] for m in [re.search(r"fsync\(\d+<([^>]*)>", call)] if m}
    names = sorted(p.name for p in folder.iterdir())
    assert {"model.safetensors", "config.json", "tokenizer.json", "training.json", "eval-single-line.json"} <= set(names)
    for name in names:        # the new files and the one carried over by hard link
        assert f"{partial}/{name}" in synced_before, (name, calls)
    assert partial in synced_before, calls
    synced_after = [m.group(1) for call in calls[publish + 1:] for m in [re.search(r"fsync\(\d+<([^>]*)>", call)] if m]
    assert str(folder.parent) in synced_after, calls

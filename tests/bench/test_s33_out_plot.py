"""`--plot` PNGs are written whole or not at all; a plot that fails costs neither the run's JSON
nor a traceback, and a `--plot` without matplotlib (an optional dependency: the `test` extra has
it, a plain install not) is refused before the run.

A full disk is made real with RLIMIT_FSIZE in a child process (writes past it fail with EFBIG).
"""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys

OLD_PNG = b"\x89PNG the last run's plot"


def limited_to(max_bytes: int):
    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # EFBIG from write(), not death by signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return preexec


def python(code: str, limit: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                          preexec_fn=limited_to(limit) if limit else None)


def test_plot_without_matplotlib_is_refused_before_the_run(tiny_model_dir, tmp_path):
    out, png = tmp_path / "typing.json", tmp_path / "typing.png"
    # None in sys.modules: `import matplotlib` fails as it does where it is not installed.
    done = python("import sys; sys.modules['matplotlib'] = None\n"
                  "from dllm_lsp.cli import main\n"
                  f"sys.exit(main(['bench', 'typing', '--clients', '1', '--keystrokes', '1', '--speed', '4', "
                  f"'--model', {str(tiny_model_dir)!r}, '--out', {str(out)!r}, '--plot', {str(png)!r}]))")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        "dllm-lsp bench typing: error: --plot needs matplotlib (pip install matplotlib)"]
    assert not out.exists() and not png.exists()     # no run was made only to be refused after it


def test_plot_on_a_full_disk_keeps_the_json_and_the_old_png(tiny_model_dir, tmp_path):
    out, png = tmp_path / "typing.json", tmp_path / "typing.png"
    png.write_bytes(OLD_PNG)
    # The JSON (a few KB) fits under the limit, the four-panel PNG (over 60 KB) does not.
    done = python("import sys\nfrom dllm_lsp.cli import main\n"
                  f"sys.exit(main(['bench', 'typing', '--clients', '1', '--keystrokes', '5', '--speed', '4', "
                  f"'--model', {str(tiny_model_dir)!r}, '--out', {str(out)!r}, '--plot', {str(png)!r}]))",
                  limit=40_000)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"dllm-lsp bench typing: error: cannot write --plot {png}: File too large")
    assert "Traceback" not in done.stderr
    assert json.loads(out.read_text())["settings"]["clients"] == [1]
    assert png.read_bytes() == OLD_PNG
    assert sorted(p.name for p in tmp_path.iterdir()) == ["typing.json", "typing.png"]


def test_loss_curve_on_a_full_disk_keeps_the_old_png(tmp_path):
    log, png = tmp_path / "train_log.jsonl", tmp_path / "loss-curve.png"
    log.write_text("".join(json.dumps({"tokens": 1000 * i, "loss": 5 - i / 10, "diffusion": 5 - i / 10}) + "\n"
                           for i in range(30)))
    png.write_bytes(OLD_PNG)
    done = python("from pathlib import Path\nfrom dllm_lsp.train.plot import plot_loss_curve\n"
                  f"plot_loss_curve(Path({str(log)!r}), Path({str(png)!r}))", limit=2_000)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == "OSError: [Errno 27] File too large"
    assert png.read_bytes() == OLD_PNG
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loss-curve.png", "train_log.jsonl"]

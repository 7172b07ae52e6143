"""`gpujob wait` when the run died before it wrote job.json (a bad flag, an import error, an --out
that is not empty): said at once, with the run's own output and exit status, instead of a lease's
call spent waiting for a job.json that never comes. And a salvaged pack's MODEL_CARD.md: written
from what the dead job left and marked salvaged, not the previous model's card brought home."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dllm_lsp.eval.tasks import default_data_dir
from dllm_lsp.gpujob.children import is_dllm_process
from dllm_lsp.gpujob.cli import main
from dllm_lsp.gpujob.pack import unpack

from .polling import wait_for

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
PREVIEW = REPO / "models" / "dllm-embedded-3m-cpu-preview"


def launch(out: Path, log: Path, *flags: str, record_exit: bool = True) -> None:
    """Start a run detached as the lease's call 1 does: in its own session, its output to `log`, and
    (`record_exit`) the launch line's echo of its exit status after it."""
    run = [sys.executable, "-m", "dllm_lsp", "gpujob", "run", "--out", str(out), *flags]
    cmd = ["sh", "-c", '"$@"; echo "gpujob run: exit status $?"', "sh", *run] if record_exit else run
    with open(log, "wb") as fh:
        subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def test_a_run_that_dies_at_its_start_is_reported_at_once_with_its_output_and_status(tmp_path, capsys):
    out, log = tmp_path / "job", tmp_path / "job.out"
    launch(out, log, "--minutes", "5", "--device", "cpu", "--no-such-flag")
    # Before: no job.json, so wait waited the whole --max-seconds and said "still running" (3).
    assert main(["wait", "--out", str(out), "--max-seconds", "120", "--log", str(log)]) == 1
    err = capsys.readouterr().err
    assert "is not running and wrote no job.json" in err and "exit status 2" in err
    assert "unrecognized arguments: --no-such-flag" in err     # the run's own words, from its output


def test_without_the_recorded_status_it_is_still_said_at_once(tmp_path, capsys):
    out, log = tmp_path / "job", tmp_path / "job.out"
    out.mkdir()
    (out / "results.json").write_text("{}")           # an earlier job's folder: the run refuses it
    launch(out, log, "--minutes", "5", "--device", "cpu", record_exit=False)
    assert main(["wait", "--out", str(out), "--max-seconds", "120", "--log", str(log)]) == 1
    err = capsys.readouterr().err
    assert "exit status unknown" in err and "is not empty" in err


def test_a_run_still_starting_is_waited_for(tmp_path, capsys):
    """Its process is there before its job.json: not taken for dead."""
    out, log = tmp_path / "job", tmp_path / "job.out"
    launch(out, log, "--minutes", "0.3", "--device", "cpu", "--phases", "bench", "--init",
           str(PREVIEW), "--bench-estimate", "kernels=100000", "--bench-estimate", "checkpoint=100000",
           "--bench-estimate", "latency=100000", "--bench-estimate", "batching=100000",
           "--bench-estimate", "block=100000", "--repo", str(tmp_path))
    assert main(["wait", "--out", str(out), "--max-seconds", "120", "--log", str(log),
                 "--copy-to", str(tmp_path / "OUT")]) == 0
    assert (tmp_path / "OUT" / "manifest.json").is_file() and "not running" not in capsys.readouterr().err


def state_of(out):
    try:
        return json.loads((out / "job.json").read_text())
    except (OSError, ValueError):
        return None


def test_a_salvaged_pack_has_a_card_written_from_what_the_job_left(tmp_path, capsys):
    """A job evaluating the preview again, killed mid-eval: its model folder is the preview's copy,
    whose card described the preview as it was shipped, and came home so."""
    out = tmp_path / "job"
    job = subprocess.Popen(
        [sys.executable, "-m", "dllm_lsp", "gpujob", "run", "--out", str(out), "--minutes", "60", "--device", "cpu",
         "--phases", "eval,bench", "--init", str(PREVIEW), "--data", str(default_data_dir()),
         "--eval-limit", "400"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: (s := state_of(out)) and s["phases"].get("eval", {}).get("state") == "running"
                 and s.get("child"), 120)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
        assert main(["wait", "--out", str(out), "--max-seconds", "120", "--copy-to", str(tmp_path / "OUT")]) == 0
    finally:
        if job.poll() is None:
            job.kill()
    repo = tmp_path / "repo"
    unpack(tmp_path / "OUT", repo)
    card = (repo / "models" / PREVIEW.name / "MODEL_CARD.md").read_text()
    old = (PREVIEW / "MODEL_CARD.md").read_text()
    assert card != old and "**Salvaged.**" in card and f"pid {job.pid}" in card
    assert "evaluated again, not trained" in card and "eval killed" in card
    training = json.loads((PREVIEW / "training.json").read_text())
    assert f"Steps: {training['steps']:,}" in card        # from the folder's own record
    assert state_of(out)["salvaged"]["card"] == "written from the folder's training.json"


def test_a_salvaged_folder_without_a_training_record_gets_a_card_that_says_so(tmp_path, tiny_model_dir):
    job, model = tmp_path / "job", tmp_path / "job" / "model" / "m"
    model.parent.mkdir(parents=True)
    subprocess.run(["cp", "-r", str(tiny_model_dir), str(model)], check=True)
    (model / "train_log.jsonl").write_text('{"step": 10, "loss": 7.5}\n{"step": 20, "loss": 6.25}\n')
    stale = (model / "MODEL_CARD.md").read_text()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not is_dllm_process(dead.pid)
    (job / "job.json").write_text(json.dumps({
        "started": "2026-11-23T10:00:00+00:00", "finished": None, "pid": dead.pid, "model_name": "m",
        "options": {"phases": ["check", "corpus", "train", "eval", "bench", "pack"], "device": "cuda"},
        "environment": {"gpu": "NVIDIA H100 80GB HBM3"},
        "phases": {"check": {"state": "done"}, "corpus": {"state": "done"}, "train": {"state": "running"}}}))
    assert main(["wait", "--out", str(job), "--max-seconds", "30", "--copy-to", str(tmp_path / "OUT")]) == 0
    unpack(tmp_path / "OUT", tmp_path / "repo")
    card = (tmp_path / "repo" / "models" / "m" / "MODEL_CARD.md").read_text()
    assert card != stale and "**Salvaged.**" in card and "train killed" in card
    assert "cut short" in card and "NVIDIA H100" in card
    assert '{"step": 20, "loss": 6.25}' in card and "No `training.json`" in card
    assert json.loads((job / "job.json").read_text())["salvaged"]["card"] == "what is known (no full card)"

"""`gpujob wait --pack-by`: a lease running out tells the detached job to pack now. The job ends
its running step as a time box would, skips every later phase but pack, and packs what it has,
so the pack is ready while the lease still has time to copy it."""
import json
import subprocess
import sys
import time

from dllm_lsp.eval.tasks import default_data_dir
from dllm_lsp.gpujob.cli import main


def test_a_job_told_to_pack_ends_its_step_and_packs(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "job"
    # An evaluation with an hour of budget: far more than this test will wait.
    job = subprocess.Popen(
        [sys.executable, "-m", "dllm_lsp", "gpujob", "run", "--out", str(out), "--minutes", "60", "--device", "cpu",
         "--phases", "eval,bench", "--init", str(tiny_model_dir), "--data", str(default_data_dir()),
         "--eval-limit", "400", "--model-name", "hurried"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        started = time.monotonic()
        rc = main(["wait", "--out", str(out), "--pack-by", "8", "--max-seconds", "120", "--copy-to", str(tmp_path / "copied")])
        waited = time.monotonic() - started
        assert job.wait(timeout=60) == 0
    finally:
        if job.poll() is None:
            job.kill()
    printed = capsys.readouterr().out
    assert rc == 0 and f"told the run (pid {job.pid}) to pack now" in printed and "pack copied to" in printed
    assert waited < 100            # nowhere near the hour: the eval was ended, bench skipped
    state = json.loads((out / "job.json").read_text())
    assert 0 < state["hurried_at_s"] < 30     # the job's clock starts after its imports, the wait's before
    phases = state["phases"]
    single = phases["eval"]["steps"][0]
    assert single["step"] == "single-line" and single["rc"] is None and single["timed_out"]
    later = phases["eval"]["steps"][1:]        # the eval's later runs say why they did not run
    assert later and all(s["state"] == "skipped" and s["why"] == "told to pack now" for s in later)
    assert phases["bench"]["state"] == "skipped" and phases["bench"]["why"] == "told to pack now"
    assert phases["pack"]["state"] == "done"
    assert (tmp_path / "copied" / "manifest.json").is_file()
    assert "ended: the job was told to pack" in (out / "job.log").read_text()

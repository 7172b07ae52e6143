"""The GPU job when the lease ends badly: the job killed mid-phase or mid-pack (`gpujob wait`
packs what it left and copies it), what a phase wrote that unpack would refuse (left out, not
costing the pack), a model folder that does not load (never replacing one that does), unpack over
uncommitted work (refused unless --force, and a second unpack of the same pack loses nothing),
and `gpujob stage` without the wheels it needs (one clear error, the earlier stage kept)."""
import json
import os
import random
import signal
import shutil
import subprocess
import sys

import pytest

from dllm_lsp.eval.tasks import default_data_dir
from dllm_lsp.gpujob.children import is_dllm_process
from dllm_lsp.gpujob.cli import main
from dllm_lsp.gpujob.pack import pack_job, unpack

from .polling import wait_for


def state_of(out):
    try:
        return json.loads((out / "job.json").read_text())
    except (OSError, ValueError):
        return None


def test_a_job_killed_mid_phase_is_packed_by_wait_and_its_orphan_step_ended(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "job"
    job = subprocess.Popen(
        [sys.executable, "-m", "dllm_lsp", "gpujob", "run", "--out", str(out), "--minutes", "60", "--device", "cpu",
         "--phases", "eval,bench", "--init", str(tiny_model_dir), "--data", str(default_data_dir()),
         "--eval-limit", "400", "--model-name", "killed"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        # The evaluation is running, its process recorded: the lease's machine kills the job's group.
        state = wait_for(lambda: (s := state_of(out)) and s["phases"].get("eval", {}).get("state") == "running"
                         and s.get("child") and s, 120)
        child = state["child"]["pid"]
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=30)
        assert is_dllm_process(child)          # its own session: the job's death did not end it
        rc = main(["wait", "--out", str(out), "--max-seconds", "90", "--copy-to", str(tmp_path / "OUT")])
    finally:
        if job.poll() is None:
            job.kill()
    printed = capsys.readouterr().out
    assert rc == 0 and "is gone before its pack was done" in printed and "pack copied to" in printed
    assert not is_dllm_process(child)          # ended, not left running unboxed
    state = state_of(out)
    assert state["salvaged"]["running_step_ended"] is True
    assert state["phases"]["eval"]["state"] == "killed" and state["phases"]["pack"]["state"] == "done"
    copied = sorted(p.name for p in (tmp_path / "OUT").iterdir())
    assert "manifest.json" in copied and len(copied) <= 8
    repo = tmp_path / "repo"
    unpack(tmp_path / "OUT", repo)
    assert (repo / "models" / "killed" / "model.safetensors").is_file()
    record = json.loads(next((repo / "docs" / "results" / "gpu-job").glob("*/job.json")).read_text())
    assert record["salvaged"] and record["phases"]["eval"]["state"] == "killed"


def fake_job(root, tokenizer: bool = True):
    job, model = root / "job", root / "job" / "model" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(random.Random(0).randbytes(20_000))
    if tokenizer:
        (model / "tokenizer.json").write_text("{}")
    (job / "results").mkdir()
    (job / "results" / "kernels-h100.json").write_text(json.dumps({"x": 1}))
    return job, model


def test_a_job_killed_while_packing_is_packed_again_by_the_next_wait(tmp_path, tiny_model_dir):
    """Killed after its pack folder was emptied and one part written, before the manifest: the
    next call's wait finds the job gone and packs anew."""
    job = tmp_path / "job"
    (job / "model").mkdir(parents=True)
    subprocess.run(["cp", "-r", str(tiny_model_dir), str(job / "model" / "m")], check=True)
    (job / "results").mkdir()
    (job / "results" / "kernels-h100.json").write_text("{}")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (job / "job.json").write_text(json.dumps({
        "started": "2026-11-23T10:00:00+00:00", "finished": "2026-11-23T10:11:00+00:00", "pid": dead.pid,
        "model_name": "m", "phases": {"bench": {"state": "done"}, "pack": {"state": "packing"}}}))
    (job / "pack").mkdir()
    (job / "pack" / "part-00.bin").write_bytes(b"half a part")
    assert main(["wait", "--out", str(job), "--max-seconds", "30", "--copy-to", str(tmp_path / "OUT")]) == 0
    written = unpack(tmp_path / "OUT", tmp_path / "repo")
    assert tmp_path / "repo" / "docs" / "results" / "kernels-h100.json" in written
    assert (tmp_path / "repo" / "models" / "m" / "model.safetensors").read_bytes() == \
        (tiny_model_dir / "model.safetensors").read_bytes()


def test_what_unpack_would_refuse_is_left_out_of_the_pack_not_the_pack_lost(tmp_path):
    """A result named with a backslash or a newline made unpack refuse the whole pack, a symlink
    too (a tar member that is no file), and a folder named like a result left no pack at all."""
    job, model = fake_job(tmp_path)
    results = job / "results"
    (results / "a\\b.json").write_text("{}")
    (results / "a\nb.json").write_text("{}")
    (results / "folder.json").mkdir()
    (results / "real.txt").write_text("{}")
    (results / "link.json").symlink_to(results / "real.txt")
    manifest = pack_job(job, model, tmp_path / "pack")
    assert sorted(os.path.basename(r["path"]) for r in manifest["refused"]) == sorted(
        ["a\\b.json", "a\nb.json", "folder.json", "link.json"])
    repo = tmp_path / "repo"
    unpack(tmp_path / "pack", repo)
    assert sorted(p.name for p in (repo / "docs" / "results").glob("*.json")) == ["kernels-h100.json"]
    assert (repo / "models" / "m" / "model.safetensors").is_file()


def test_a_model_folder_that_does_not_load_never_replaces_one_that_does(tmp_path, tiny_model_dir):
    job, model = fake_job(tmp_path, tokenizer=False)      # a first save cut short: no tokenizer
    manifest = pack_job(job, model, tmp_path / "pack-job", require_model=True)   # as the job packs
    assert "no tokenizer.json" in manifest["model_left_out"]
    assert not any(f["dest"].startswith("models/") for f in manifest["files"])
    assert any(f["dest"] == "docs/results/kernels-h100.json" for f in manifest["files"])
    # A pack that holds such a folder anyway (another packer) over the working model of that name
    pack_job(job, model, tmp_path / "pack")
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    subprocess.run(["cp", "-r", str(tiny_model_dir), str(repo / "models" / "m")], check=True)
    before = (repo / "models" / "m" / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match="not a loadable model folder"):
        unpack(tmp_path / "pack", repo)
    assert (repo / "models" / "m" / "model.safetensors").read_bytes() == before
    assert not (repo / "docs").exists()


def git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_unpack_keeps_uncommitted_work_and_a_second_unpack_loses_nothing(tmp_path, capsys):
    job, model = fake_job(tmp_path)
    pack_job(job, model, tmp_path / "pack")
    repo = tmp_path / "repo"
    (repo / "models" / "m").mkdir(parents=True)
    (repo / "models" / "m" / "config.json").write_text('{"old": 1}')
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "m")
    (repo / "models" / "m" / "notes.md").write_text("the user's notes\n")      # untracked
    (repo / "docs" / "results").mkdir(parents=True)
    (repo / "docs" / "results" / "kernels-h100.json").write_text("edited\n")    # untracked, other bytes
    assert main(["unpack", str(tmp_path / "pack"), "--repo", str(repo)]) == 1
    err = capsys.readouterr().err
    assert "uncommitted work" in err and "notes.md" in err and "kernels-h100.json" in err and "--force" in err
    assert (repo / "models" / "m" / "notes.md").is_file()
    assert (repo / "models" / "m" / "config.json").read_text() == '{"old": 1}'   # nothing written
    (repo / "models" / "m" / "notes.md").unlink()
    (repo / "docs" / "results" / "kernels-h100.json").unlink()
    assert main(["unpack", str(tmp_path / "pack"), "--repo", str(repo)]) == 0     # the old config is in git
    # Again, before committing: the same bytes, nothing lost, nothing refused.
    assert main(["unpack", str(tmp_path / "pack"), "--repo", str(repo)]) == 0
    (repo / "models" / "m" / "notes.md").write_text("the user's notes\n")
    assert main(["unpack", str(tmp_path / "pack"), "--repo", str(repo), "--force"]) == 0
    assert not (repo / "models" / "m" / "notes.md").exists()


def test_stage_without_a_wheel_in_the_index_is_one_clear_error_and_keeps_the_last_stage(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    wheels = repo / ".gpujob" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "pygls-0.0.0-py3-none-any.whl").write_bytes(b"an earlier stage's")
    (tmp_path / "empty-index").mkdir()
    # No network: an empty local index and nothing else.
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty-index"))
    assert main(["stage", "--repo", str(repo)]) == 1
    err = capsys.readouterr().err
    assert "pip could not download every wheel the lease installs" in err and "pygls==" in err
    assert [p.name for p in wheels.iterdir()] == ["pygls-0.0.0-py3-none-any.whl"]
    assert not (repo / ".gpujob" / "wheels.new").exists()


def test_stage_replaces_an_earlier_stages_wheels_instead_of_adding_to_them(tmp_path, monkeypatch):
    """Two versions of one package in .gpujob/wheels fail the lease's `pip install wheels/*.whl`
    (ResolutionImpossible), and with it the whole lease."""
    staged = os.path.join(os.path.dirname(__file__), "..", "..", ".gpujob", "wheels")
    if not os.path.isdir(staged) or len(os.listdir(staged)) < 16:
        pytest.skip("needs a staged .gpujob/wheels as the local index (dllm-lsp gpujob stage)")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    wheels = repo / ".gpujob" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "attrs-1.0.0-py3-none-any.whl").write_bytes(b"an earlier stage's")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", os.path.abspath(staged))
    assert main(["stage", "--repo", str(repo)]) == 0
    names = sorted(p.name for p in wheels.iterdir())
    assert len(names) == 16 and "attrs-1.0.0-py3-none-any.whl" not in names


def test_a_save_killed_between_its_renames_is_packed_from_the_folder_set_aside(tmp_path, tiny_model_dir):
    # The trainer writes `.m.partial`, moves `m` to `.m.old`, then renames the new one into place
    # (train/folder.py): killed between the two, the last whole save is `.m.old`, and the pack
    # left the model out as missing.
    job, model = fake_job(tmp_path)
    shutil.rmtree(model)
    shutil.copytree(tiny_model_dir, model.parent / ".m.old")
    (model.parent / ".m.partial").mkdir()
    manifest = pack_job(job, model, tmp_path / "pack", require_model=True)
    assert "model_left_out" not in manifest, manifest
    assert any(f["dest"] == "models/m/model.safetensors" for f in manifest["files"]), manifest["files"]
    assert model.is_dir() and not (model.parent / ".m.partial").exists()

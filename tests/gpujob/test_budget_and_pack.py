"""The GPU job's time boxes and its pack / unpack, without running a job."""
import io
import json
import os
import random

import pytest

from dllm_lsp.engine.denoise import RUN_STATE_ENV
from dllm_lsp.gpujob.budget import FLOOR_S, Budget, parse_phases
from dllm_lsp.gpujob.check import DEVICE_STATE, described, run_state_fallback
from dllm_lsp.gpujob.pack import pack_job, sha256_of, unpack
from dllm_lsp.gpujob.run import BENCHES, DEFAULT_MODEL_NAME, Job, JobOptions, job_model_name
from dllm_lsp.loader import default_name


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_boxes_follow_the_priorities():
    clock = Clock()
    total = 2400
    budget = Budget(total / 60, clock=clock)               # a 40-minute job: every share above its floor
    assert budget.box("check") == pytest.approx(0.08 * total)
    clock.now += 100                                       # the check ended early
    assert budget.box("corpus") == pytest.approx(0.10 * total)   # 10%, not more
    clock.now += 0.10 * total
    train = budget.box("train")
    # Training gets all but the shares of eval (14%), bench (18%) and pack (3%).
    assert train == pytest.approx(total - 100 - 0.10 * total - 0.35 * total)
    clock.now += train
    assert budget.box("eval") == pytest.approx(0.14 * total)
    clock.now += 0.04 * total                              # eval ended early: bench gets its time
    assert budget.box("bench") == pytest.approx(0.28 * total)
    clock.now += 0.10 * total
    assert budget.box("bench") == pytest.approx(0.18 * total)
    clock.now += 0.18 * total
    assert budget.box("pack") == pytest.approx(0.03 * total)


def test_the_check_keeps_its_floor_in_a_short_job():
    """An 11.5-minute measure-only job: 8% would be 55 s, less than the check's ~21 processes need."""
    budget = Budget(11.5, phases=("check", "bench", "pack"), clock=Clock())
    assert budget.box("check") == pytest.approx(FLOOR_S["check"])


def test_late_phases_get_nothing_once_time_is_gone():
    clock = Clock()
    budget = Budget(10, clock=clock)
    clock.now += 590                                       # ten seconds left
    assert budget.box("train") <= 0 and budget.box("eval") <= 0 and budget.box("bench") <= 0
    assert budget.box("pack") == pytest.approx(10)         # packing keeps whatever is left
    with pytest.raises(ValueError):
        Budget(0)


def test_a_subset_of_phases_reserves_nothing_for_those_left_out():
    phases = parse_phases("bench,check")
    assert phases == ("check", "bench", "pack")             # priority order, pack always
    clock = Clock()
    budget = Budget(25, clock=clock, phases=phases)
    clock.now += 60                                        # the check took a minute
    assert budget.box("bench") == pytest.approx(1500 - 60 - 0.03 * 1500)   # all but the pack's reserve
    with pytest.raises(ValueError, match="unknown phase.*trian"):
        parse_phases("check,trian")


def fake_job(root, weights_bytes: int):
    job, model = root / "job", root / "job" / "model" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(random.Random(0).randbytes(weights_bytes))   # incompressible
    (model / "train_log.jsonl").write_text('{"step": 1}\n' * 2000)
    (job / "results").mkdir()
    (job / "results" / "kernels-h100.json").write_text(json.dumps({"x": 1}))
    (job / "job.json").write_text(json.dumps({"started": "2026-11-23T10:00:00+00:00"}))
    return job, model


def test_pack_splits_into_parts_and_unpack_restores_every_file(tmp_path):
    job, model = fake_job(tmp_path, 600_000)
    manifest = pack_job(job, model, tmp_path / "pack", part_bytes=100_000)
    assert 2 <= len(manifest["parts"]) <= 7 and not manifest["left_out"]
    repo = tmp_path / "repo"
    (repo / "models" / "m").mkdir(parents=True)
    (repo / "models" / "m" / "stale.bin").write_text("old")   # the continued model replaces the folder
    (repo / "models" / "DEFAULT").write_text("small-cpu-model\n")
    written = unpack(tmp_path / "pack", repo, make_default=True)
    assert (repo / "models" / "m" / "model.safetensors").read_bytes() == (model / "model.safetensors").read_bytes()
    assert (repo / "docs" / "results" / "kernels-h100.json").is_file()
    assert (repo / "docs" / "results" / "gpu-job" / "20261123-1000" / "job.json").is_file()
    assert not (repo / "models" / "m" / "stale.bin").exists()
    marker = (repo / "models" / "DEFAULT").read_text()
    # The GPU-trained model becomes the default on GPUs; CPUs keep theirs until it is measured there.
    assert default_name(marker, "cuda") == "m" and default_name(marker, "cpu") == "small-cpu-model"
    assert len(written) == len(manifest["files"]) + 1


def test_a_pack_too_big_leaves_out_the_least_needed_files(tmp_path):
    job, model = fake_job(tmp_path, 340_000)
    (model / "train_log.jsonl").write_text(random.Random(1).randbytes(40_000).hex())
    manifest = pack_job(job, model, tmp_path / "pack", part_bytes=50_000, max_files=8)
    assert len(manifest["parts"]) <= 7
    dests = [f["dest"] for f in manifest["files"]]
    assert "models/m/model.safetensors" in dests          # the weights come first
    assert manifest["left_out"] and "models/m/model.safetensors" not in manifest["left_out"]
    with pytest.raises(ValueError, match="do not fit"):
        pack_job(job, model, tmp_path / "pack2", part_bytes=10_000, max_files=3)


@pytest.mark.parametrize("dest", ["models/../docs/x.md", "models/./x", "/etc/x", "src/x.py", "docs/../../x",
                                  "models/m", "docs", "models//x", "models\\m\\x"])
def test_unpack_refuses_a_manifest_that_writes_outside_models_and_docs(tmp_path, dest):
    """Before this was checked, `models/../docs/x.md` made unpack replace the folder models/.. (the
    whole checkout) with the pack's."""
    job, model = fake_job(tmp_path, 10_000)
    pack = tmp_path / "pack"
    manifest = pack_job(job, model, pack)
    manifest["files"][0]["dest"] = dest
    (pack / "manifest.json").write_text(json.dumps(manifest))
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "keep.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="refusing file entry"):
        unpack(pack, repo)
    assert (repo / "src" / "keep.py").read_text() == "x = 1\n"


@pytest.mark.parametrize("manifest", ["[]", "{}", '{"archive_sha256": "x", "parts": [{"name": "../x"}], "files": []}',
                                      "not json"])
def test_unpack_refuses_a_manifest_of_another_shape(tmp_path, manifest):
    (tmp_path / "pack").mkdir()
    (tmp_path / "pack" / "manifest.json").write_text(manifest)
    with pytest.raises(ValueError, match="not a GPU job manifest"):
        unpack(tmp_path / "pack", tmp_path / "repo")


def test_unpack_refuses_a_corrupt_or_incomplete_pack(tmp_path):
    job, model = fake_job(tmp_path, 300_000)
    pack = tmp_path / "pack"
    manifest = pack_job(job, model, pack, part_bytes=100_000)
    part = pack / manifest["parts"][1]["name"]
    data = bytearray(part.read_bytes())
    data[10] ^= 0xFF
    part.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupt"):
        unpack(pack, tmp_path / "repo")
    part.unlink()
    with pytest.raises(ValueError, match="missing"):
        unpack(pack, tmp_path / "repo")
    assert not (tmp_path / "repo" / "models").exists()     # nothing half-written


def test_the_bench_plan_orders_missing_figures_first_and_names_what_each_measures(tmp_path):
    """A lease's benchmarks: the open issues' first (kernels, typing), figures the checkout already
    has after those it lacks, a past file that lacks what the benchmark now records (the latency
    JSON before `--profile`) counted as missing, and the command line each runs."""
    repo = tmp_path / "repo"
    results = repo / "docs" / "results"
    results.mkdir(parents=True)
    (results / "batching-cpu.json").write_text("{}")
    (results / "latency-cpu-dllm-embedded-30m.json").write_text('{"cases": {}}')    # no profile
    job = Job(JobOptions(out=tmp_path / "job", minutes=5, device="cpu", repo=repo), log=io.StringIO())
    order = [item.name for item in job.bench_order("cpu")]
    assert order[:2] == ["kernels", "typing"] and order[-1] == "batching"
    assert order.index("latency") < order.index("typing-graphs")
    (results / "latency-cpu-dllm-embedded-30m.json").write_text('{"cases": {}, "profile": {}}')
    assert [item.name for item in job.bench_order("cpu")][-2:] == ["latency", "batching"]   # had: last, in order
    (results / "checkpoint-cpu.json").write_text('{"completion_ms": {}}')     # from before the graphed figures
    assert job.bench_order("cpu")[-2].name == "latency"
    (results / "checkpoint-cpu.json").write_text('{"completion_ms": {}, "cuda_graphs": null}')
    assert [item.name for item in job.bench_order("cpu")][-3:] == ["checkpoint", "latency", "batching"]
    args = {item.name: job.bench_args(item, tmp_path / f"{item.name}.json") for item in BENCHES}
    assert "--profile" in args["kernels"] and "--profile" in args["checkpoint"] and "--profile" in args["latency"]
    variants = [a for i, a in enumerate(args["typing-graphs"]) if args["typing-graphs"][i - 1] == "--serve-variant"]
    assert variants == ["batched=", "cuda-graphs=--cuda-graphs"]
    assert "serial=--no-batching" in args["typing"] and "no-prefix-reuse=--prefix-cache 0" in args["typing"]


def test_a_continued_model_warms_its_fresh_optimizer_up_briefly(tmp_path):
    job = Job(JobOptions(out=tmp_path / "job", minutes=5, device="cpu"), log=io.StringIO())
    assert job.continued_warmup() == ["--warmup", "100"]             # gpu-30m's own is 500
    small = Job(JobOptions(out=tmp_path / "small", minutes=5, device="cpu", preset="tiny-test"), log=io.StringIO())
    assert small.continued_warmup() == ["--warmup", "10"]            # never more than the preset's
    told = Job(JobOptions(out=tmp_path / "told", minutes=5, device="cpu", train_args=["--warmup=300"]),
               log=io.StringIO())
    assert told.continued_warmup() == []                              # --train-arg decides


def test_the_run_state_falls_back_to_the_device_only_when_the_host_layout_alone_fails():
    pair = {"model": "embedded, run state on the host against on the device", "run_state_pair": True}
    assert run_state_fallback([{"model": "x", "ok": True}]) is None                    # no such pair
    assert run_state_fallback([{**pair, "ok": True, "host_failed": False, "device_failed": False}]) is None
    assert run_state_fallback([{**pair, "ok": False, "host_failed": True, "device_failed": False}]) == "device"
    assert run_state_fallback([{**pair, "ok": False, "host_failed": True, "device_failed": True}]) is None
    fine = {**pair, "ok": True, "host_failed": False, "device_failed": False}
    assert run_state_fallback([fine, {**pair, "ok": False, "host_failed": True, "device_failed": False}]) == "device"
    assert described(("m", "cuda", 1, (), DEVICE_STATE)) == "cuda x1 DLLM_LSP_RUN_STATE=device"


def test_a_job_told_to_keep_the_run_state_on_the_device_passes_it_to_every_child(tmp_path):
    job = Job(JobOptions(out=tmp_path / "job", minutes=5, device="cpu"), log=io.StringIO())
    assert RUN_STATE_ENV not in job.env() or job.env()[RUN_STATE_ENV] == os.environ.get(RUN_STATE_ENV)
    report = tmp_path / "job" / "check" / "cuda-check.json"
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"kernels": {}, "engine": [], "run_state_fallback": "device"}))
    job.child = lambda *args, **kwargs: None        # the check's report is already there
    job.check(60.0)
    assert job.env()[RUN_STATE_ENV] == "device" and job.state["run_state"] == "device"


def test_a_job_that_does_not_train_keeps_the_init_folders_name(tmp_path):
    """The pack brings the job's model home to models/NAME: a measure-only job given another model
    (`--init models/dllm-embedded-3m-cpu-preview`) must not bring it home as the 30M model."""
    measure = parse_phases("check,bench")
    preview = tmp_path / "models" / "dllm-embedded-3m-cpu-preview"
    assert job_model_name(JobOptions(out=tmp_path, minutes=5, phases=measure, init=str(preview))) == preview.name
    assert job_model_name(JobOptions(out=tmp_path, minutes=5, phases=measure, init=str(preview) + "/")) == preview.name
    assert job_model_name(JobOptions(out=tmp_path, minutes=5, phases=measure)) == DEFAULT_MODEL_NAME   # auto
    assert job_model_name(JobOptions(out=tmp_path, minutes=5, init=str(preview))) == DEFAULT_MODEL_NAME  # trains it
    assert job_model_name(JobOptions(out=tmp_path, minutes=5, phases=measure, init=str(preview),
                                     model_name="renamed")) == "renamed"


def test_unpack_refuses_an_unreadable_archive_in_one_line_and_make_default_before_writing(tmp_path):
    job, model = fake_job(tmp_path, 10_000)
    pack = tmp_path / "pack"
    manifest = pack_job(job, model, pack)
    # a second model folder: --make-default cannot choose, and used to say so after writing both
    manifest["files"].append({**manifest["files"][0], "dest": "models/other/config.json"})
    (pack / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="exactly one model folder"):
        unpack(pack, tmp_path / "repo", make_default=True)
    assert not (tmp_path / "repo").exists()
    # parts whose hashes match but whose archive is not a tar.gz: a traceback, before
    garbage = b"not a tar.gz at all"
    manifest = {**manifest, "parts": [{"name": "part-000.bin", "bytes": len(garbage), "sha256": sha256_of(garbage)}],
                "archive_sha256": sha256_of(garbage)}
    (pack / "part-000.bin").write_bytes(garbage)
    (pack / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="archive cannot be read"):
        unpack(pack, tmp_path / "repo")


@pytest.mark.parametrize("minutes", [float("nan"), float("inf"), 0, -1])
def test_a_budget_that_never_ends_or_never_begins_is_refused(minutes):
    with pytest.raises(ValueError, match="--minutes must be a positive number"):
        Budget(minutes)


def test_a_job_never_runs_into_a_folder_an_earlier_one_left(tmp_path):
    # Its results and check would be packed as this job's, dated today.
    (tmp_path / "job" / "results").mkdir(parents=True)
    (tmp_path / "job" / "results" / "latency-h200-old.json").write_text("{}")
    with pytest.raises(ValueError, match="is not empty"):
        Job(JobOptions(out=tmp_path / "job", minutes=5, device="cpu"), log=io.StringIO())

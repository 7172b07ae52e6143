"""The whole GPU job, dry-run on the CPU: every phase through its real child processes (the
kernel check in Triton's interpreter, a corpus, a tokenizer, training the tiny preset, both
evaluations, quick benchmarks, the pack), its time boxes, a kernel failure rehearsed and
carried through the later phases, a benchmark skipped because its estimate does not fit, and
the pack unpacked into a repository where the model completes code. Two and a half minutes of
budget, so the job cannot rot while no GPU is at hand."""
import json
import subprocess
import sys

import pytest

from dllm_lsp.eval.results import read_result
from dllm_lsp.eval.tasks import default_data_dir
from dllm_lsp.gpujob.cli import main

MINUTES = 2.5


@pytest.fixture(scope="module")
def job(tmp_path_factory, sample_sources):
    root = tmp_path_factory.mktemp("gpujob")
    src = sample_sources
    out = root / "job"
    rc = main(["run", "--out", str(out), "--minutes", str(MINUTES), "--device", "cpu", "--preset", "tiny-test",
               "--quick", "--folder", str(src), "--corpus-license", "MIT", "--corpus-max-mb", "1",
               "--tokenizer-sample-mb", "1", "--eval-limit", "3", "--data", str(default_data_dir()),
               "--drill-fail", "rope", "--bench-estimate", "checkpoint=100000", "--model-name", "dry-model"])
    return rc, out, json.loads((out / "job.json").read_text())


def test_every_phase_ran_within_the_budget(job):
    rc, out, state = job
    assert rc == 0, (out / "job.log").read_text()[-3000:]
    phases = state["phases"]
    assert list(phases) == ["check", "corpus", "train", "eval", "bench", "pack"]
    assert {name: p["state"] for name, p in phases.items()} == {
        "check": "done_with_failures", "corpus": "done", "train": "done", "eval": "done", "bench": "partial",
        "pack": "done"}
    total = sum(p["seconds"] for p in phases.values())
    assert total <= MINUTES * 60 + 20    # the boxes hold (a child ends at its box; the pack keeps a reserve)
    for name, p in phases.items():
        assert p["seconds"] <= p["box_s"] + 20, name


def test_a_failing_kernel_is_reported_and_disabled_for_the_rest_of_the_job(job):
    _, out, state = job
    check = json.loads((out / "check" / "cuda-check.json").read_text())
    failed = [c for c in check["kernels"]["cases"] if not c["ok"]]
    assert failed and {c["kernel"] for c in failed} == {"rope"}
    assert "drill" in failed[0]["error"]
    assert check["kernels"]["failed_kernels"] == ["rope"] and state["disabled_kernels"] == ["rope"]
    assert all(row["ok"] for row in check["engine"])          # the engine path still works without it
    shared = [row for row in check["engine"] if "shared steps" in row["model"]]
    assert len(shared) == 1 and shared[0]["agree"] == "3/3"   # all requests at once: the same completions
    graphed = [row for row in check["engine"] if "CUDA-graph cached steps" in row["model"]]
    assert len(graphed) == 1 and graphed[0]["model"].startswith("dream")   # an open checkpoint's, too
    states = [row for row in check["engine"] if row.get("run_state_pair")]
    assert len(states) == 2 and all(row["agree"] == "3/3" and not row["host_failed"] for row in states)
    assert states[1]["model"].startswith("dream")
    assert check["run_state_fallback"] is None and "run_state" not in state
    assert "disabled from now on: rope" in (out / "job.log").read_text()


def test_training_evaluation_and_benchmarks_left_their_files(job):
    _, out, state = job
    model = out / "model" / "dry-model"
    training = json.loads((model / "training.json").read_text())
    assert training["steps"] > 0 and training["options"]["save_dtype"] == "int8"
    # What the first lease's report needs to say whether the GPU was fed and compiled.
    summary = state["phases"]["train"]["summary"]
    assert 0 <= summary["data_wait_share"] < 1 and summary["compile"] is False and summary["compile_failed"] is None
    assert "steps waited for batches" in (model / "MODEL_CARD.md").read_text()
    for name in ("single-line", "random-span-light"):
        result = read_result(model / f"eval-{name}.json")
        assert result["tasks"] == 3 and set(result["modes"]) == {"unknown", "oracle", "editor"}
        # Each run infills for its share of the box and scores what it has (the H200's first run
        # filled its box and left nothing): the time it was given is in its command.
        assert "--max-seconds" in result["command"]
        assert 0 <= result["modes"]["editor"]["passed"] <= result["modes"]["editor"]["shown"] <= 3
        editor = state["phases"]["eval"]["summary"][name]["editor"]
        assert editor["shown"] == result["modes"]["editor"]["shown"]
        # the first GPU model's answer to "does its confidence tell right from wrong?" (None: no pair to rank)
        assert editor["confidence_auroc"] == (result["modes"]["editor"].get("confidence") or {}).get("auroc_mean")
        unknown = result["modes"]["unknown"]
        written = sum(bool(sample["completion"].strip()) for sample in unknown["samples"])   # an empty one has none
        assert (unknown.get("confidence") or {"with_confidence": 0})["with_confidence"] == written
    ablation = {step["step"]: step for step in state["phases"]["eval"]["steps"]}["single-line-ends-balanced"]
    if ablation.get("state") != "skipped":       # the last of the box: it runs when time is left
        result = json.loads((model / "eval-single-line-ends-balanced.json").read_text())
        assert set(result["modes"]) == {"unknown"} and result["settings"]["ends_balanced"] is True
    companion = {step["step"]: step for step in state["phases"]["eval"]["steps"]}["single-line-editor-companion"]
    if companion.get("state") != "skipped":
        result = json.loads((model / "eval-single-line-editor-companion.json").read_text())
        assert set(result["modes"]) == {"editor"} and result["settings"]["companion_edits"] is True
    through = {step["step"]: step for step in state["phases"]["eval"]["steps"]}["single-line-editor-typed-through"]
    if through.get("state") != "skipped":
        result = json.loads((model / "eval-single-line-editor-typed-through.json").read_text())
        assert set(result["modes"]) == {"editor"} and result["settings"]["typed_through"] == "([{.=,\"'"
    bench = {step["step"]: step for step in state["phases"]["bench"]["steps"]}
    assert bench["kernels"]["rc"] == 0 and bench["latency"]["rc"] == 0
    # bench batching comes after them: it runs when the box still holds its estimate.
    batching = bench["batching"]
    assert batching.get("rc") == 0 if batching.get("state") != "skipped" else "never started" in batching["why"]
    if batching.get("state") != "skipped":
        assert json.loads((out / "results" / "batching-cpu.json").read_text())["cases"]
    assert bench["checkpoint"]["state"] == "skipped" and "never started" in bench["checkpoint"]["why"]
    assert (out / "results" / "kernels-cpu.json").is_file()
    assert not (out / "results" / "checkpoint-cpu.json").exists()
    assert (model / "loss-curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "loss-curve.png" in (model / "MODEL_CARD.md").read_text()


def test_the_pack_unpacks_into_a_repository_whose_model_completes(job, tmp_path):
    _, out, _ = job
    files = sorted((out / "pack").iterdir())
    assert len(files) <= 8 and all(f.stat().st_size <= 16 * 1024 * 1024 for f in files)
    repo = tmp_path / "repo"
    assert main(["unpack", str(out / "pack"), "--repo", str(repo)]) == 0
    model = repo / "models" / "dry-model"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "MODEL_CARD.md", "train_log.jsonl",
                 "loss-curve.png", "eval-single-line.json", "corpus_stats.json"):
        assert (model / name).is_file(), name
    # every eval the job ran comes home, its per-task samples with it
    assert {p.name for p in model.glob("eval-*.json")} == {p.name for p in (out / "model" / "dry-model").glob("eval-*.json")}
    assert read_result(model / "eval-single-line.json")["modes"]["unknown"]["samples"]
    assert (repo / "docs" / "results" / "kernels-cpu.json").is_file()
    job_records = list((repo / "docs" / "results" / "gpu-job").glob("*/job.json"))
    assert len(job_records) == 1 and json.loads(job_records[0].read_text())["phases"]["train"]["state"] == "done"
    done = subprocess.run([sys.executable, "-m", "dllm_lsp", "infill", "--model", str(model), "--device", "cpu",
                           "--steps", "2"], input='{"id": 1, "prefix": "def f(x):\\n    return ", "suffix": "\\n"}\n',
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["id"] == 1 and "completion" in json.loads(done.stdout)


def test_a_job_without_training_benchmarks_the_given_model_missing_figures_first(job, tmp_path):
    """`--phases bench`: a later lease measures what earlier ones had no time for. The model is the
    one --init names (copied into the job, packed with it); a figure the checkout already has
    (kernels-cpu.json here) goes after the ones it lacks."""
    _, first, _ = job
    repo = tmp_path / "repo"
    (repo / "docs" / "results").mkdir(parents=True)
    (repo / "docs" / "results" / "kernels-cpu.json").write_text("{}")
    # A latency figure from before `bench --profile`: still missing (it lacks the profile).
    (repo / "docs" / "results" / "latency-cpu-dry-model.json").write_text('{"cases": {}}')
    out = tmp_path / "again"
    rc = main(["run", "--out", str(out), "--minutes", "1.5", "--device", "cpu", "--preset", "tiny-test", "--quick",
               "--phases", "bench", "--init", str(first / "model" / "dry-model"),   # no --model-name: the folder's
               "--repo", str(repo), "--bench-estimate", "checkpoint=100000", "--bench-estimate", "block=100000"])
    state = json.loads((out / "job.json").read_text())
    assert rc == 0, (out / "job.log").read_text()[-3000:]
    assert {name: p["state"] for name, p in state["phases"].items()} == {
        "check": "not_selected", "corpus": "not_selected", "train": "not_selected", "eval": "not_selected",
        "bench": "partial", "pack": "done"}
    bench = state["phases"]["bench"]
    assert bench["already_in_repo"] == ["kernels"]
    order = [step["step"] for step in bench["steps"]]
    assert order[-1] == "kernels" and order.index("latency") < order.index("kernels")
    steps = {step["step"]: step for step in bench["steps"]}
    assert steps["latency"]["rc"] == 0 and (out / "results" / "latency-cpu-dry-model.json").is_file()
    assert "profile" in json.loads((out / "results" / "latency-cpu-dry-model.json").read_text())
    assert state["model_from"] == str(first / "model" / "dry-model")
    unpacked = tmp_path / "unpacked"
    assert main(["unpack", str(out / "pack"), "--repo", str(unpacked)]) == 0
    card = (unpacked / "models" / "dry-model" / "MODEL_CARD.md").read_text()
    assert "Evaluated again, not trained" in card
    assert (unpacked / "models" / "dry-model" / "eval-single-line.json").is_file()   # the model's own, kept


def test_stage_copies_the_benchmark_data_and_ignores_the_folder(tmp_path):
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".git" / "info" / "exclude").unlink(missing_ok=True)   # some git setups write none
    assert main(["stage", "--repo", str(repo), "--no-wheels"]) == 0
    assert (repo / ".gpujob" / "data" / "HumanEval-SingleLineInfilling.jsonl.gz").is_file()
    assert "/.gpujob/" in (repo / ".git" / "info" / "exclude").read_text()
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
    assert ".gpujob" not in status.stdout
    assert main(["stage", "--repo", str(repo), "--no-wheels"]) == 0   # again: no second exclude line
    assert (repo / ".git" / "info" / "exclude").read_text().count("/.gpujob/") == 1


def test_unpack_of_a_folder_without_a_manifest_is_one_clear_line(tmp_path, capsys):
    assert main(["unpack", str(tmp_path), "--repo", str(tmp_path)]) == 1
    assert "not a GPU job pack" in capsys.readouterr().err

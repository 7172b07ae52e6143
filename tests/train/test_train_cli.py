"""End to end on a tiny config: corpus -> tokenizer -> a few training steps -> a model folder
the loader and engine use, and a model card built from the run's own records."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import InfillRequest
from dllm_lsp.loader import load_model
from dllm_lsp.train.cli import main
from dllm_lsp.train.examples import LayoutOptions
from dllm_lsp.train.loop import TrainOptions, train
from dllm_lsp.train.presets import MODEL_KEYS, preset


@pytest.fixture(scope="module")
def trained(tmp_path_factory, sample_sources) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("train")
    src = sample_sources
    work, out = root / "work", root / "model"
    rc = main(["all", "--work", str(work), "--out", str(out), "--folder", str(src), "--assume-license", "MIT",
               "--val-percent", "20", "--preset", "tiny-test", "--steps", "6", "--eval-every", "3",
               "--save-every", "3", "--threads", "1"])
    assert rc == 0
    return work, out


def test_pipeline_writes_a_loadable_model_folder(trained):
    work, out = trained
    for name in ("config.json", "model.safetensors", "tokenizer.json", "train_log.jsonl", "training.json"):
        assert (out / name).is_file(), name
    config = json.loads((out / "config.json").read_text())
    assert config["max_positions"] == 128 and config["training"] == {"seq_len": 128, "max_slot": 32}
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert any("val_diffusion" in rec for rec in log) and any("loss" in rec for rec in log)
    summary = json.loads((out / "training.json").read_text())
    assert summary["steps"] == 6 and summary["tokens"] == 6 * 4 * 128 and summary["final"]
    # How long the steps waited for batches (a GPU run's sign of too few --workers).
    assert 0 < summary["data_wait_share"] < 1
    assert all(0 <= rec["data_wait"] < 1 for rec in log if "loss" in rec)
    stats = json.loads((work / "corpus" / "stats.json").read_text())
    assert stats["train"]["tokens"] > 0 and stats["tokenizer_vocab"] == 512

    denoiser = load_model(out, "cpu")
    result = Engine(denoiser).infill(InfillRequest.single("def add(a, b):\n", "\n", 8))
    assert result.steps >= 1 and isinstance(result.text, str)


def test_resume_continues_the_step_count_and_bf16_runs_on_cpu(trained, capsys):
    work, out = trained
    rc = main(["model", "--corpus", str(work / "corpus"), "--tokenizer", str(work / "tokenizer.json"),
               "--out", str(out), "--preset", "tiny-test", "--steps", "8", "--resume", "--threads", "1", "--bf16"])
    assert rc == 0
    summary = json.loads((out / "training.json").read_text())
    assert summary["steps"] == 8 and summary["bf16_autocast"] is True
    # Where the CPU has no native bf16, the run says it is on the slow path.
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert ("has no native bf16" in capsys.readouterr().out) == (not native)
    assert all(math.isfinite(rec["loss"]) for rec in map(json.loads, (out / "train_log.jsonl").read_text().splitlines())
               if "loss" in rec)


def test_card_is_built_from_the_records(trained, tmp_path):
    work, out = trained
    evaluation = {"benchmark": "single-line", "unknown_slot_tokens": 32, "settings": {"steps": 8, "threshold": 0.9},
                  "device": "cpu", "length_gap_points": 1.0,
                  "modes": {"unknown": {"tasks": 10, "passed": 2, "pass@1": 0.2, "mean_steps": 5.0,
                                        "tokens_per_step": 1.5, "mean_latency_ms": 12.0},
                            # stopped by time (eval --max-seconds): the card says of how many
                            "oracle": {"tasks": 4, "planned": 10, "passed": 1, "pass@1": 0.25, "mean_steps": 3.0,
                                       "tokens_per_step": 1.0, "mean_latency_ms": 9.0}}}
    ev = tmp_path / "eval.json"
    ev.write_text(json.dumps(evaluation))
    assert main(["card", "--model", str(out), "--corpus", str(work / "corpus"), "--eval", str(ev),
                 "--title", "tiny test model"]) == 0
    card = (out / "MODEL_CARD.md").read_text()
    assert card.startswith("# tiny test model")
    assert "20.0% (2/10)" in card and "MIT" in card and "causal_context" in card
    assert "| single-line | 4 of 10 (time) | oracle | 25.0% (1/4) |" in card and "| single-line | 10 |" in card
    assert "steps waited for batches" in card and "torch.compile failed" not in card
    assert (out / "corpus_stats.json").is_file()


def test_bad_input_gives_clear_errors(tmp_path, capsys):
    assert main(["corpus", "--out", str(tmp_path / "c"), "--folder", str(tmp_path / "missing")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["model", "--corpus", str(tmp_path), "--tokenizer", str(tmp_path / "t.json"),
                 "--out", str(tmp_path / "m"), "--preset", "nope", "--steps", "1"]) == 1
    assert "unknown preset" in capsys.readouterr().err
    assert main(["tokenizer", "--corpus", str(tmp_path), "--out", str(tmp_path / "t.json"), "--vocab-size", "100"]) == 1
    assert "vocab size" in capsys.readouterr().err


def test_a_corpus_with_no_benchmark_to_keep_out_is_refused(tmp_path, capsys, monkeypatch):
    """An installed package has no benchmark folder beside it: it built its corpus against
    nothing, without a word (HumanEval solutions copied into a folder were kept)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("def g(x):\n    return x\n" * 50)
    monkeypatch.setenv("DLLM_LSP_EVAL_DATA", str(tmp_path / "no-benchmark-here"))
    assert main(["corpus", "--out", str(tmp_path / "c"), "--folder", str(tmp_path / "src")]) == 1
    err = capsys.readouterr().err
    assert "no benchmark files to keep out of the corpus" in err and "--decontaminate" in err
    assert not (tmp_path / "c").exists()


def test_bench_training_data_measures_one_core_and_the_data_loader(trained, tmp_path):
    work, _ = trained
    out = tmp_path / "td.json"
    proc = subprocess.run([sys.executable, "-m", "dllm_lsp", "bench", "training-data", "--corpus", str(work / "corpus"),
                           "--tokenizer", str(work / "tokenizer.json"), "--preset", "tiny-test",
                           "--uses-per-file", "1,4", "--rounds", "2", "--batches", "2", "--workers", "1",
                           "--target-steps-per-second", "50", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "round 2/2" in proc.stdout          # progress
    result = json.loads(out.read_text())
    assert result["settings"]["seq_len"] == 128 and result["settings"]["batch_size"] == 4
    assert [r["uses_per_file"] for r in result["one_core"]] == [1.0, 4.0]
    for row in result["one_core"]:
        assert row["examples_per_second"] > 0
        assert row["workers_for_target"] == math.ceil(50 * row["batch_ms_p50"] / 1000)
    assert set(result["speedup_over_one_use"]) == {"4"}
    assert result["data_loader"]["workers"] == 1 and result["data_loader"]["steps_per_second"] > 0
    assert result["environment"]["python"]

    missing = subprocess.run([sys.executable, "-m", "dllm_lsp", "bench", "training-data", "--corpus",
                              str(tmp_path / "nothing"), "--tokenizer", str(work / "tokenizer.json")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "build the corpus first" in missing.stderr
    bad = subprocess.run([sys.executable, "-m", "dllm_lsp", "bench", "training-data", "--corpus", str(work / "corpus"),
                          "--tokenizer", str(work / "tokenizer.json"), "--uses-per-file", "0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "--uses-per-file" in bad.stderr


# Dynamo warns that it traces through the kernels' cached dispatch check; it is read-only there.
@pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")
def test_a_failing_compiler_costs_the_compile_not_the_run(trained, tmp_path):
    work, _ = trained

    def failing_backend(graph_module, example_inputs):
        raise RuntimeError("drill: this compiler cannot build the graph")

    said = []
    p = preset("tiny-test")
    opts = TrainOptions(corpus=work / "corpus", out=tmp_path / "m", tokenizer=work / "tokenizer.json",
                        model={k: p[k] for k in MODEL_KEYS if k != "vocab_size"},
                        layout=LayoutOptions(seq_len=p["seq_len"], max_slot=p["max_slot"]),
                        batch_size=p["batch_size"], max_steps=3, warmup=2, compile=True, threads=1)
    opts.compile_backend = failing_backend
    summary = train(opts, log=said.append)
    assert summary["steps"] == 3 and summary["final"]
    assert summary["compile"] is False and "drill: this compiler" in summary["compile_failed"]
    assert sum("torch.compile failed" in line for line in said) == 1
    assert load_model(tmp_path / "m", "cpu") is not None
    assert main(["card", "--model", str(tmp_path / "m")]) == 0
    assert "torch.compile failed on the first step" in (tmp_path / "m" / "MODEL_CARD.md").read_text()

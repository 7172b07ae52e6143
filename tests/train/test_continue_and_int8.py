"""Continuing a model folder (what every GPU job does with the shipped model) and int8 weight
storage (what keeps a ~30M-parameter shipped model small enough to travel)."""
import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from dllm_lsp.arch.embedded import EmbeddedConfig, EmbeddedModel
from dllm_lsp.arch.tiny import sample_corpus
from dllm_lsp.arch.tokenizer import special_ids, train_tokenizer
from dllm_lsp.arch.weight_storage import SCALE_SUFFIX, load_weights, save_weights
from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings, InfillRequest
from dllm_lsp.loader import load_model
from dllm_lsp.train.cli import main
from dllm_lsp.train.loop import MAX_SKIPPED_IN_A_ROW


def test_int8_storage_round_trips_within_half_a_step_per_row(tmp_path):
    torch.manual_seed(0)
    model = EmbeddedModel(EmbeddedConfig(vocab_size=300, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96))
    state = model.state_dict()
    save_weights(state, tmp_path / "int8.safetensors", "int8")
    save_weights(state, tmp_path / "bf16.safetensors", "bfloat16")
    back = load_weights(tmp_path / "int8.safetensors")
    assert back.keys() == state.keys()
    for name, want in state.items():
        got = back[name]
        if want.dim() == 2 and want.numel() >= 4096:
            step = want.abs().amax(1, keepdim=True) / 127
            assert ((got - want).abs() <= step / 2 + 1e-6).all(), name
        else:
            assert torch.allclose(got, want, atol=1e-2, rtol=1e-2), name
    with safe_open(str(tmp_path / "int8.safetensors"), "pt") as fh:
        assert fh.metadata()["dllm_lsp_storage"] == "int8-rowwise"
        assert fh.get_tensor("embed.weight").dtype == torch.int8
        assert "embed.weight" + SCALE_SUFFIX in fh.keys()
    assert (tmp_path / "int8.safetensors").stat().st_size < 0.6 * (tmp_path / "bf16.safetensors").stat().st_size


def test_weights_are_readable_as_the_folders_other_files_are(tmp_path):
    """safetensors writes 0600: a model folder trained by one user could not be served by another."""
    save_weights({"w": torch.zeros(4, 4)}, tmp_path / "m.safetensors")
    (tmp_path / "config.json").write_text("{}")
    assert (tmp_path / "m.safetensors").stat().st_mode & 0o777 == (tmp_path / "config.json").stat().st_mode & 0o777


def test_int8_without_scales_is_refused(tmp_path):
    save_file({"w": torch.zeros(4, 4, dtype=torch.int8)}, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ValueError, match="without w.int8_scale"):
        load_weights(tmp_path / "bad.safetensors")


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, sample_sources):
    root = tmp_path_factory.mktemp("cont")
    src = sample_sources
    work, out = root / "work", root / "first"
    assert main(["all", "--work", str(work), "--out", str(out), "--folder", str(src), "--assume-license", "MIT",
                 "--val-percent", "20", "--preset", "tiny-test", "--steps", "5", "--eval-every", "5",
                 "--threads", "1", "--save-dtype", "int8"]) == 0
    return work, out


def test_an_int8_model_folder_loads_and_completes(first_run):
    _, out = first_run
    denoiser = load_model(out, "cpu")
    result = Engine(denoiser).infill(InfillRequest.single("def add(a, b):\n", "\n", 8), DecodeSettings(steps=2))
    assert result.steps >= 1 and isinstance(result.text, str)


def test_continuing_a_folder_keeps_its_weights_and_adds_to_its_counters(first_run, tmp_path):
    work, first = first_run
    second = tmp_path / "second"
    # Zero steps: the continued model must be the folder's model, weight for weight.
    assert main(["model", "--corpus", str(work / "corpus"), "--tokenizer", str(first / "tokenizer.json"),
                 "--out", str(second), "--preset", "tiny-test", "--steps", "3", "--lr", "0",
                 "--init-from", str(first), "--threads", "1", "--save-dtype", "float32"]) == 0
    before, after = load_weights(first / "model.safetensors"), load_weights(second / "model.safetensors")
    assert all(torch.allclose(before[k], after[k], atol=1e-6) for k in before)   # lr 0: nothing moved
    summary = json.loads((second / "training.json").read_text())
    assert summary["steps"] == 5 + 3 and summary["tokens"] == 8 * 4 * 128
    assert [run["steps"] for run in summary["runs"]] == [5, 3]
    steps = [rec["step"] for rec in map(json.loads, (second / "train_log.jsonl").read_text().splitlines())
             if "loss" in rec]
    assert steps[0] == 1 and 6 in steps and steps == sorted(steps)   # one curve: run 1 from 1, run 2 from 6
    # Each run keeps its own settings, and the card lists the runs.
    assert summary["runs"][1]["lr"] == 0 and summary["runs"][0]["lr"] > 0
    assert summary["runs"][1]["continued_from"] == str(first)
    assert main(["card", "--model", str(second), "--title", "continued"]) == 0
    card = (second / "MODEL_CARD.md").read_text()
    rows = [line for line in card.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    cells = [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]
    assert [row[1] for row in cells] == ["5", "3"] and float(cells[1][5]) == 0 and float(cells[0][5]) > 0, rows
    assert "totals over 2 runs" in card
    assert (second / "loss-curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![training loss](loss-curve.png)" in card and "where each later run began" in card


def test_continuing_with_another_tokenizer_is_refused(first_run, tmp_path, capsys):
    work, first = first_run
    other = train_tokenizer(sample_corpus(), 400)
    special_ids(other)
    other.save(str(tmp_path / "tokenizer.json"))
    rc = main(["model", "--corpus", str(work / "corpus"), "--tokenizer", str(tmp_path / "tokenizer.json"),
               "--out", str(tmp_path / "x"), "--preset", "tiny-test", "--steps", "1", "--init-from", str(first)])
    assert rc == 1 and "its own tokenizer.json" in capsys.readouterr().err


def test_steps_whose_loss_goes_nan_are_skipped_and_the_run_stops_as_diverged(first_run, tmp_path, capsys):
    # lr 1e30: the first step throws every weight to ~1e30, after which each loss is NaN. The run
    # must not apply those steps (the weights would all turn NaN), must stop instead of spending
    # its time box on them, and must say so with exit status 1.
    work, first = first_run
    out = tmp_path / "diverged"
    rc = main(["model", "--corpus", str(work / "corpus"), "--tokenizer", str(first / "tokenizer.json"),
               "--out", str(out), "--preset", "tiny-test", "--steps", "200", "--lr", "1e30", "--warmup", "0",
               "--init-from", str(first), "--threads", "1", "--save-dtype", "float32"])
    err = capsys.readouterr().err
    assert rc == 1 and "dllm-lsp train: error: training diverged" in err and f"{out} holds step 6" in err, err
    summary = json.loads((out / "training.json").read_text())
    assert summary["diverged"] is True and summary["skipped_steps"] == MAX_SKIPPED_IN_A_ROW
    assert summary["runs"][-1]["steps"] == 1          # stopped long before its 200 steps
    load_model(out, "cpu")                            # what it kept is finite and loads


def test_weights_that_went_infinite_never_replace_the_folder(first_run, tmp_path, capsys):
    # lr 1e36 overflows the weights themselves in one step: no save may write them over the
    # folder's good model (the GPU job continues and ships what is there).
    work, first = first_run
    out = tmp_path / "kept"
    shutil.copytree(first, out)
    before = (out / "model.safetensors").read_bytes()
    rc = main(["model", "--corpus", str(work / "corpus"), "--tokenizer", str(first / "tokenizer.json"),
               "--out", str(out), "--preset", "tiny-test", "--steps", "200", "--lr", "1e36", "--warmup", "0",
               "--init-from", str(first), "--threads", "1", "--save-every", "1"])
    err = capsys.readouterr().err
    assert rc == 1 and f"{out} holds what it held before this run" in err, err
    assert (out / "model.safetensors").read_bytes() == before


def test_resume_continues_a_continued_folder_and_keeps_its_earlier_runs(first_run, tmp_path, capsys):
    work, first = first_run
    out = tmp_path / "continued"
    common = ["--corpus", str(work / "corpus"), "--tokenizer", str(first / "tokenizer.json"), "--out", str(out),
              "--preset", "tiny-test", "--threads", "1"]
    assert main(["model", *common, "--steps", "2", "--init-from", str(first)]) == 0
    assert main(["model", *common, "--steps", "4", "--resume"]) == 0
    summary = json.loads((out / "training.json").read_text())
    assert [run["steps"] for run in summary["runs"]] == [5, 4] and summary["steps"] == 9   # the first run kept


def test_architecture_flags_that_disagree_with_a_continued_model_are_refused(first_run, tmp_path, capsys):
    # They were ignored: the run trained the folder's model and exited 0, with the flag recorded.
    work, first = first_run
    config = json.loads((first / "config.json").read_text())
    common = ["--corpus", str(work / "corpus"), "--tokenizer", str(first / "tokenizer.json"),
              "--preset", "tiny-test", "--threads", "1", "--steps", "1", "--init-from", str(first)]
    out = tmp_path / "wider"
    assert main(["model", *common, "--out", str(out), "--dim", str(config["dim"] * 2), "--layout", "bidirectional"]) == 1
    err = capsys.readouterr().err
    assert f"--dim {config['dim'] * 2} (it has {config['dim']})" in err and "--layout bidirectional" in err, err
    assert not out.exists()
    # The same values as the model's are no clash, and neither are a preset's defaults
    # (another preset's layers, say): the record names the model's architecture, not the preset's.
    assert main(["model", *common, "--out", str(out), "--dim", str(config["dim"]), "--preset", "cpu-small"]) == 0
    recorded = json.loads((out / "training.json").read_text())["options"]["model"]
    assert (recorded["dim"], recorded["ffn_dim"]) == (config["dim"], config["ffn_dim"]) != (192, 512)


def test_a_folder_continued_without_a_preset_keeps_its_window_and_slot(first_run, tmp_path):
    """It was trained on the default preset's (cpu-small: 256-token windows, 48-token slots), and
    its config then recorded those."""
    work, first = first_run
    recorded = json.loads((first / "config.json").read_text())["training"]
    out = tmp_path / "kept-layout"
    assert main(["model", "--corpus", str(work / "corpus"), "--tokenizer", str(first / "tokenizer.json"),
                 "--out", str(out), "--steps", "1", "--threads", "1", "--init-from", str(first)]) == 0
    assert json.loads((out / "config.json").read_text())["training"] == recorded != {"seq_len": 256, "max_slot": 48}
    assert json.loads((out / "training.json").read_text())["options"]["batch_size"] == 4    # tiny-test's, not 8


def test_resume_drops_the_log_records_past_the_resumed_state(first_run, tmp_path):
    """A run killed between two saves had logged steps its optimizer state does not hold; the
    resumed run logged them again and the loss curve went backwards."""
    work, first = first_run
    out = tmp_path / "killed"
    common = ["--corpus", str(work / "corpus"), "--tokenizer", str(first / "tokenizer.json"), "--out", str(out),
              "--preset", "tiny-test", "--threads", "1"]
    assert main(["model", *common, "--steps", "2", "--init-from", str(first)]) == 0
    log = out / "train_log.jsonl"
    saved = json.loads(log.read_text().splitlines()[-1])["step"]
    with log.open("a") as fh:        # what the killed run logged after its last save
        fh.write(json.dumps({"step": saved + 1, "loss": 9.0}) + "\n" + json.dumps({"step": saved + 2, "loss": 9.0}) + "\n")
    assert main(["model", *common, "--steps", "3", "--resume"]) == 0
    steps = [json.loads(line)["step"] for line in log.read_text().splitlines()]
    assert steps == sorted(steps) and 9.0 not in [json.loads(line).get("loss") for line in log.read_text().splitlines()]


def test_resume_refuses_what_it_cannot_resume_in_one_line(first_run, tmp_path, capsys):
    work, first = first_run
    moved = shutil.copytree(first, tmp_path / "moved")          # its optimizer state stayed behind
    before = (moved / "model.safetensors").read_bytes()
    common = ["--corpus", str(work / "corpus"), "--tokenizer", str(first / "tokenizer.json"),
              "--preset", "tiny-test", "--threads", "1", "--steps", "3"]
    # It started afresh from random weights over the trained folder, and said nothing.
    assert main(["model", *common, "--out", str(moved), "--resume"]) == 1
    err = capsys.readouterr().err
    assert "--resume: no optimizer state" in err and f"--init-from {moved}" in err and "Traceback" not in err
    assert (moved / "model.safetensors").read_bytes() == before
    state = tmp_path / f".{moved.name}.train_state.pt"
    state.write_bytes(b"not a torch file")
    assert main(["model", *common, "--out", str(moved), "--resume"]) == 1
    assert "cannot continue this model" in capsys.readouterr().err
    broken = shutil.copytree(first, tmp_path / "broken")
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert main(["model", *common, "--out", str(tmp_path / "o"), "--init-from", str(broken)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dllm-lsp train: error: --init-from") and err.count("\n") == 1, err

"""An eval result records which weights it is of: the sha256 of the folder's weight files (the
file's own, as `sha256sum` prints it), the folder's name and its config's sha256. Two results of
one folder whose weights changed in between (a model trained on) recorded the same name and
nothing else. The card shows each eval's weights and flags one of weights other than the folder's;
an older result without them still reads."""
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.eval.cli import main
from dllm_lsp.eval.results import read_result
from dllm_lsp.train.cli import main as train_main

TASKS = [{"task_id": f"T/{i}", "prompt": "def value():\n    return ", "suffix": "\n", "canonical_solution": str(i),
          "test": f"def check(f):\n    assert f() == {i}\n", "entry_point": "value"} for i in range(2)]


@pytest.fixture
def data(tmp_path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    return path


def evaluate(capsys, data: Path, model: Path, *extra: str) -> tuple[int, str]:
    rc = main(["humaneval-infilling", "--data", str(data), "--model", str(model), "--device", "cpu",
               "--modes", "oracle", "--steps", "2", *extra])
    return rc, capsys.readouterr().out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_results_of_different_weights_in_one_folder_tell_them_apart(tmp_path, data, capsys):
    folder = write_tiny_model(tmp_path / "tiny", seed=1)
    rc, printed = evaluate(capsys, data, folder, "--json", "--out", str(tmp_path / "first.json"))
    assert rc == 0
    first = json.loads(printed)
    weights = first["weights"]
    assert weights == {"folder": "tiny", "sha256": sha256(folder / "model.safetensors"),
                       "files": {"model.safetensors": sha256(folder / "model.safetensors")},
                       "config_sha256": sha256(folder / "config.json")}
    assert read_result(tmp_path / "first.json")["weights"] == weights

    shutil.rmtree(folder)
    write_tiny_model(folder, seed=2)     # the same folder, other weights
    rc, printed = evaluate(capsys, data, folder, "--json", "--out", str(tmp_path / "second.json"))
    assert rc == 0
    second = read_result(tmp_path / "second.json")
    assert second["model"] == first["model"] == "tiny"
    assert second["weights"]["sha256"] == sha256(folder / "model.safetensors") != weights["sha256"]
    assert second["weights"]["config_sha256"] == weights["config_sha256"]    # same config, other weights


def test_the_table_says_which_weights(tmp_path, data, capsys):
    folder = write_tiny_model(tmp_path / "tiny")
    rc, printed = evaluate(capsys, data, folder)
    assert rc == 0 and "| | oracle |" in printed
    assert f"model: tiny weights sha256:{sha256(folder / 'model.safetensors')[:12]}" in printed


def test_the_card_shows_each_evals_weights_and_reads_older_results(tmp_path, data, capsys, sample_sources):
    work, model = tmp_path / "work", tmp_path / "model"
    assert train_main(["all", "--work", str(work), "--out", str(model), "--folder", str(sample_sources),
                       "--assume-license", "MIT", "--val-percent", "20", "--preset", "tiny-test", "--steps", "2",
                       "--threads", "1", "--decontaminate", str(data)]) == 0
    rc, _ = evaluate(capsys, data, model, "--json", "--out", str(model / "eval-now.json"))
    assert rc == 0
    stale = json.loads((model / "eval-now.json").read_text())
    stale["weights"]["sha256"] = "0" * 64        # a result of the weights before further training
    (tmp_path / "eval-stale.json").write_text(json.dumps(stale))
    older = {k: v for k, v in stale.items() if k != "weights"}     # written before weights were recorded
    (tmp_path / "eval-older.json").write_text(json.dumps(older))
    assert train_main(["card", "--model", str(model), "--eval", str(model / "eval-now.json"),
                       "--eval", str(tmp_path / "eval-stale.json"), "--eval", str(tmp_path / "eval-older.json")]) == 0
    lines = [line for line in (model / "MODEL_CARD.md").read_text().splitlines() if line.startswith("- tasks:")]
    own = sha256(model / "model.safetensors")[:12]
    assert len(lines) == 3
    assert lines[0].endswith(f"; model weights sha256:{own})")
    assert lines[1].endswith(f"; model weights sha256:000000000000, NOT this folder's weights (sha256:{own}): "
                             "evaluated before later training)")
    assert lines[2].endswith("; model (weights not recorded))")

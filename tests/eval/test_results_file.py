"""An eval result's per-task samples live xz'd beside its figures (dllm_lsp/eval/results.py)."""
from __future__ import annotations

import json

from dllm_lsp.eval.results import main, read_result, samples_path, write_result


def inline_result(tasks: int = 300) -> dict:
    samples = [{"task_id": f"SingleLineInfilling/HumanEval/{i}/L0", "completion": f"return x + {i}",
                "passed": i % 3 == 0, "reason": "passed" if i % 3 == 0 else "failed: AssertionError"}
               for i in range(tasks)]
    return {"benchmark": "single-line", "pass@1": 0.33, "tasks": tasks,
            "modes": {"unknown": {"mode": "unknown", "tasks": tasks, "samples": samples},
                      "editor": {"mode": "editor", "tasks": tasks, "shown": 7, "samples": samples[:7]}}}


def test_split_moves_the_samples_out_and_reads_back_the_same(tmp_path, capsys):
    path = tmp_path / "single-line.json"
    full = inline_result()
    path.write_text(json.dumps(full, indent=1) + "\n")
    before = path.stat().st_size
    assert main(["split", str(path)]) == 0
    assert "bytes saved" in capsys.readouterr().out
    figures = json.loads(path.read_text())
    assert figures["samples_file"] == "single-line.samples.json.xz" == samples_path(path).name
    assert all("samples" not in mode for mode in figures["modes"].values())
    assert path.stat().st_size + samples_path(path).stat().st_size < before / 4
    assert read_result(path) == full
    # a second split finds nothing inline and changes nothing
    assert main(["split", str(path)]) == 0 and "nothing inline" in capsys.readouterr().out
    assert read_result(path) == full


def test_a_result_without_samples_reads_as_written_and_drops_a_stale_samples_file(tmp_path):
    path = tmp_path / "r.json"
    write_result(path, inline_result(5))
    assert samples_path(path).is_file()
    bare = {"benchmark": "single-line", "modes": {"oracle": {"mode": "oracle", "tasks": 0}}}
    write_result(path, bare)
    assert not samples_path(path).exists() and read_result(path) == bare


def test_split_of_a_file_that_is_not_json_fails_clearly_and_leaves_it(tmp_path, capsys):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    assert main(["split", str(path)]) == 1
    assert "broken.json" in capsys.readouterr().err
    assert path.read_text() == "{not json" and not samples_path(path).exists()

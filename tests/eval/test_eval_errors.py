"""`dllm-lsp eval humaneval-infilling` turns a bad data file or setting into one line and exit 1,
checked before the model loads."""
import json

import pytest

from dllm_lsp.eval.cli import main
from dllm_lsp.eval.tasks import load_tasks

TASK = {"task_id": "T/0", "prompt": "def value():\n    return ", "suffix": "\n", "canonical_solution": "1",
        "test": "def check(f):\n    assert f() == 1\n", "entry_point": "value"}


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("dllm-lsp eval: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize("line, kind", [("[1, 2]", "array"), ('"a task"', "string"), ("7", "number"),
                                        ("null", "null")])
def test_a_data_line_that_is_not_an_object_names_the_file_and_line(tmp_path, capsys, line, kind):
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps(TASK) + "\n" + line + "\n")
    with pytest.raises(ValueError, match=rf"tasks\.jsonl:2: not a task: a JSON object with task_id, .* not a JSON {kind}$"):
        load_tasks(data)
    # the model is never loaded: a missing one would be the error otherwise
    assert main(["humaneval-infilling", "--data", str(data), "--model", str(tmp_path / "none")]) == 1
    assert one_error_line(capsys) == (f"dllm-lsp eval: error: {data}:2: not a task: a JSON object with task_id, "
                                      f"prompt, suffix, canonical_solution, test, entry_point expected, "
                                      f"not a JSON {kind}")


@pytest.mark.parametrize("extra, expected", [
    (["--context", "0"], "--context must be within 16..1048576, not 0"),
    (["--context", "-5"], "--context must be within 16..1048576, not -5"),
    (["--context", "2000000"], "--context must be within 16..1048576, not 2000000"),
    (["--threads", "-1"], "--threads must be at least 1, not -1"),
    (["--timeout", "0"], "--timeout must be more than 0 seconds, not 0"),
    (["--workers", "0"], "--workers must be at least 1, not 0"),
    (["--max-tokens", "-1"], "--max-tokens must be at least 1, not -1"),
])
def test_bad_settings_are_one_line_before_the_model_loads(tmp_path, capsys, extra, expected):
    data = tmp_path / "tasks.jsonl"
    data.write_text(json.dumps(TASK) + "\n")
    assert main(["humaneval-infilling", "--data", str(data), "--model", str(tmp_path / "none"), *extra]) == 1
    assert one_error_line(capsys) == f"dllm-lsp eval: error: {expected}"


def test_no_default_benchmark_folder_outside_a_checkout_says_how_to_give_one(tmp_path, monkeypatch):
    """Installed from a wheel, the default folder beside the repository is a path inside the Python
    installation: the message had told the user to put the files there."""
    from dllm_lsp.eval import tasks

    monkeypatch.delenv(tasks.DATA_ENV, raising=False)
    monkeypatch.setattr(tasks, "default_data_dir", lambda: tmp_path / "not-a-checkout" / "shared" / "eval")
    with pytest.raises(ValueError, match="no benchmark folder is set.*--data-dir DIR"):
        tasks.resolve_data("single-line")

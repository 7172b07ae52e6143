"""The subcommands with parsers of their own (`eval`, `train`, `ray`, `gpujob`) refuse a mistyped
or missing first word as the main parser does: the likely one named, or what is wanted and the
choices. `eval` with too few tasks says why it has no AUROC; `bench startup` rounds its summary.

The parsers run through `dllm_lsp.cli.main` in this process (the same delegation as the
`dllm-lsp` command, without a subprocess's torch import for each case)."""
from __future__ import annotations

import json
import re

import pytest

from dllm_lsp import cli
from dllm_lsp.bench import startup
from dllm_lsp.eval.cli import confidence_line
from dllm_lsp.eval.infilling import confidence_report
from dllm_lsp.pipeline import Confidence


def usage_error(args: list[str], capsys) -> str:
    """The last stderr line of a usage error (argparse's status 2), checked to be one."""
    with pytest.raises(SystemExit) as done:
        cli.main(args)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("args, says", [
    (["eval", "humaneval-infiling"],
     "dllm-lsp eval: error: unknown benchmark 'humaneval-infiling': did you mean 'humaneval-infilling'?"),
    (["eval", "humaneval", "--limit", "3"], "did you mean 'humaneval-infilling'?"),
    (["train", "corpse", "--out", "x"], "dllm-lsp train: error: unknown step 'corpse': did you mean 'corpus'?"),
    (["train", "modl"], "did you mean 'model'?"),
    (["ray", "deplo"], "dllm-lsp ray: error: unknown command 'deplo': did you mean 'deploy'?"),
    (["gpujob", "rn"], "dllm-lsp gpujob: error: unknown command 'rn': did you mean 'run'?"),
    (["gpujob", "unpak", "pack"], "did you mean 'unpack'?"),
])
def test_a_mistyped_subcommand_names_the_likely_one(args, says, capsys):
    if args[0] == "ray":
        pytest.importorskip("ray")      # without the extra, `dllm-lsp ray` says how to install it
    line = usage_error(args, capsys)
    assert says in line, line


def test_a_word_like_none_lists_the_choices_without_a_guess(capsys):
    line = usage_error(["train", "frobnicate"], capsys)
    assert "did you mean" not in line
    assert line.endswith("(steps: corpus, tokenizer, model, all, card)"), line


@pytest.mark.parametrize("args, says", [
    (["eval"], "dllm-lsp eval: error: missing the benchmark (benchmarks: humaneval-infilling)"),
    (["eval", "--json"], "missing the benchmark (benchmarks: humaneval-infilling)"),
    (["train"], "dllm-lsp train: error: missing the step (steps: corpus, tokenizer, model, all, card)"),
    (["gpujob"], "dllm-lsp gpujob: error: missing the command (commands: run, wait, stage, unpack)"),
])
def test_a_missing_subcommand_is_named_with_its_choices(args, says, capsys):
    line = usage_error(args, capsys)
    assert line == says or line.endswith(says), line
    assert "required: bench" not in line and "required: step" not in line


def test_help_and_a_right_word_still_reach_argparse(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["eval", "--help"])
    assert done.value.code == 0 and "humaneval-infilling" in capsys.readouterr().out
    # a known benchmark goes on to its own parser, which refuses the option it lacks (argparse's words)
    line = usage_error(["eval", "humaneval-infilling", "--no-such-flag"], capsys)
    assert "unrecognized arguments: --no-such-flag" in line, line


def test_eval_with_only_failing_tasks_says_why_it_has_no_auroc(tiny_model_dir, tmp_path, capsys):
    # the tiny random model's `return <noise>` fails every `f() == i`: all fail, nothing to rank
    tasks = [{"task_id": f"T/{i}", "prompt": "def value():\n    return ", "suffix": "\n",
              "canonical_solution": str(i), "test": f"def check(f):\n    assert f() == {i}\n",
              "entry_point": "value"} for i in range(2)]
    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    assert cli.main(["eval", "humaneval-infilling", "--data", str(data), "--model", str(tiny_model_dir),
                     "--device", "cpu", "--modes", "oracle", "--steps", "2"]) == 0
    err = capsys.readouterr().err
    assert "oracle: AUROC: needs passing and failing tasks (0 of 2 with a confidence passed)" in err, err
    assert "None" not in err


def test_the_confidence_line_gives_the_auroc_where_there_is_one():
    confidences = [Confidence(mean=m, least=m / 2, tokens=3) for m in (0.9, 0.8, 0.3)]
    report = confidence_report(confidences, [True, False, False])
    assert confidence_line("editor", report) == \
        "editor: confidence tells passing from failing with AUROC 1.0 (mean), 1.0 (least)"


def test_bench_startup_summary_rounds_its_figures_and_its_json_does_not(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "startup.json"
    assert startup.main(["--model", str(tiny_model_dir), "--device", "cpu", "--runs", "1", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    variants = json.loads(out.read_text())["variants"]
    assert [line.split(":")[0] for line in lines] == list(variants)
    for line, v in zip(lines, variants.values()):
        figures = re.findall(r"p50 (\S+) ms", line)
        expected = [v[key]["p50_ms"] for key in ("first_answer_ms", "first_completion_ms", "later_completion_ms")]
        assert figures == [f"{ms:.1f}" for ms in expected], line
    # the JSON keeps percentiles' precision: the figures are not rounded there
    assert any(round(v["later_completion_ms"]["p50_ms"], 1) != v["later_completion_ms"]["p50_ms"]
               for v in variants.values())

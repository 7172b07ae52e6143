import json
import time

import pytest

from dllm_lsp.engine.engine import Engine
from dllm_lsp.engine.types import DecodeSettings
from dllm_lsp.eval.cli import length_gap_points, main
from dllm_lsp.eval.infilling import GATE_KEEPS, ModeResult, auroc, evaluate
from dllm_lsp.eval.results import read_result
from dllm_lsp.eval.tasks import Task, load_tasks, resolve_data, spread_order, spread_subset
from dllm_lsp.loader import load_model
from dllm_lsp.options import DecodeOptions, Options, PlannerOptions

TASKS = [
    {"task_id": f"T/{i}", "prompt": "def value():\n    return ", "suffix": "\n", "canonical_solution": str(i),
     "test": f"def check(f):\n    assert f() == {i}\n", "entry_point": "value"}
    for i in range(3)
]


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    return path


def eval_json(capsys, data, model, out, *extra: str) -> dict:
    """`dllm-lsp eval humaneval-infilling --json --out OUT ...` on the CPU: its printed report."""
    rc = main(["humaneval-infilling", "--data", str(data), "--model", str(model), "--device", "cpu",
               "--json", "--out", str(out), *extra])
    assert rc == 0
    return json.loads(capsys.readouterr().out)


def test_json_report_has_the_headline_and_both_length_settings(data, tiny_model_dir, capsys, tmp_path):
    out = tmp_path / "full.json"
    report = eval_json(capsys, data, tiny_model_dir, out, "--steps", "4", "--max-tokens", "6")
    assert 0.0 <= report["pass@1"] <= 1.0 and report["tasks"] == 3 and report["unknown_slot_tokens"] == 6
    assert set(report["modes"]) == {"unknown", "oracle"}
    for mode in report["modes"].values():
        assert mode["tasks"] == 3 and 1 <= mode["mean_steps"] <= 4
        assert mode["passed"] == round(mode["pass@1"] * 3)
    assert report["pass@1"] == report["modes"]["unknown"]["pass@1"]
    assert report["length_gap_points"] == round(100 * (report["modes"]["oracle"]["pass@1"] - report["pass@1"]), 1)
    assert report["command"].startswith("dllm-lsp eval humaneval-infilling --data ") and "--max-tokens 6" in report["command"]
    assert report["wall_seconds"] > 0 and report["settings"]["concurrency"] == 1    # a CPU's default
    assert report["environment"]["device"] == "cpu" and report["environment"]["torch"]
    # the figures' file carries no per-task records: they are xz'd beside it (eval/results.py)
    assert all("samples" not in m for m in json.loads(out.read_text())["modes"].values())
    assert (tmp_path / "full.samples.json.xz").is_file()
    full = read_result(out)
    samples = full["modes"]["oracle"]["samples"]
    assert [s["task_id"] for s in samples] == ["T/0", "T/1", "T/2"]
    assert all(isinstance(s["completion"], str) and isinstance(s["passed"], bool) for s in samples)


def test_table_output_and_one_mode(data, tiny_model_dir, capsys):
    rc = main(["humaneval-infilling", "--data", str(data), "--model", str(tiny_model_dir), "--device", "cpu",
               "--modes", "oracle", "--steps", "2", "--limit", "2"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| | oracle |" in out and "/2 |" in out and "unknown" not in out


def test_bad_arguments_are_reported(data, tiny_model_dir, capsys, tmp_path):
    assert main(["humaneval-infilling", "--data", str(tmp_path / "none.jsonl"), "--model", str(tiny_model_dir)]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["humaneval-infilling", "--data", str(data), "--model", str(tiny_model_dir), "--modes", "psychic"]) == 1
    assert "--modes" in capsys.readouterr().err
    assert main(["humaneval-infilling", "--data", str(data), "--model", str(tmp_path / "no-model")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["humaneval-infilling", "--data", str(data), "--model", str(tiny_model_dir), "--concurrency", "0"]) == 1
    assert "--concurrency" in capsys.readouterr().err
    assert main(["humaneval-infilling", "--data", str(data), "--model", str(tiny_model_dir),
                 "--typed", "2", "--typed-through", "("]) == 1
    assert "give one" in capsys.readouterr().err
    # TASKS' lines (`0`, `1`, `2`) have no bracket: nothing is left to evaluate.
    assert main(["humaneval-infilling", "--data", str(data), "--model", str(tiny_model_dir), "--typed-through", "("]) == 1
    assert "no task's line" in capsys.readouterr().err


def test_typed_through_keeps_the_tasks_whose_line_has_such_a_character(tiny_model_dir, capsys, tmp_path):
    lines = ["print(x)", "x", "d[k]", "(", "a.b"]     # `x` has none, `(` only as its last character
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps({"task_id": f"T/{i}", "prompt": "def f(x, d, k, a):\n    ",
                                        "suffix": "\n", "canonical_solution": line, "test": "def check(f):\n    pass\n",
                                        "entry_point": "f"}) + "\n" for i, line in enumerate(lines)))
    report = eval_json(capsys, path, tiny_model_dir, tmp_path / "out.json", "--modes", "editor", "--steps", "2",
                       "--typed-through", "([.")
    assert report["tasks"] == 3 and report["settings"]["typed_through"] == "([."
    full = read_result(tmp_path / "out.json")
    assert [s["task_id"] for s in full["modes"]["editor"]["samples"]] == ["T/0", "T/2", "T/4"]


def test_remasking_and_confidence_flags_reach_the_decode_loop(data, tiny_model_dir, capsys):
    def run(*flags: str) -> dict:
        rc = main(["humaneval-infilling", "--data", str(data), "--model", str(tiny_model_dir), "--device", "cpu",
                   "--json", "--modes", "unknown", "--steps", "16", "--max-tokens", "6", *flags])
        assert rc == 0
        return json.loads(capsys.readouterr().out)

    plain = run()
    # Re-opening everything committed with confidence below 1 keeps the slot open until the step budget
    # runs out; without remasking a 6-token slot needs at most a handful of steps.
    remasked = run("--remask-below", "1.0", "--confidence", "prob")
    assert plain["settings"]["remask_below"] is None and remasked["settings"]["remask_below"] == 1.0
    assert plain["modes"]["unknown"]["mean_steps"] < 16 <= remasked["modes"]["unknown"]["mean_steps"]
    margin = run("--confidence", "margin")
    assert margin["settings"]["confidence"] == "margin"


def test_bad_decode_flags_are_refused_by_the_options_schema(data, tiny_model_dir, capsys):
    assert main(["humaneval-infilling", "--data", str(data), "--model", str(tiny_model_dir),
                 "--remask-below", "1.5"]) == 1
    assert "remaskBelow must be within 0..1" in capsys.readouterr().err


def test_the_unknown_length_slot_grows_and_the_oracle_slot_does_not(data, tiny_model_dir, capsys, monkeypatch):
    widths: dict[str, list[tuple[int, ...]]] = {}
    infill = Engine.infill

    def spy(self, request, settings, *args, **kwargs):
        result = infill(self, request, settings, *args, **kwargs)
        widths.setdefault(str(settings.slot_start_tokens), []).append(result.slot_widths)
        return result

    monkeypatch.setattr(Engine, "infill", spy)
    # threshold 1.0: the random model commits one token a step and fills its 4-token start.
    rc = main(["humaneval-infilling", "--data", str(data), "--model", str(tiny_model_dir), "--device", "cpu",
               "--json", "--steps", "4", "--threshold", "1.0", "--max-tokens", "12", "--slot-start-tokens", "4"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["settings"]["slot_start_tokens"] == 4
    assert widths["4"] and all(w[0] > 4 for w in widths["4"])          # unknown length: grew from 4
    assert widths["0"] == [(1,)] * 3                                    # oracle: the span's own length
    rc = main(["humaneval-infilling", "--data", str(data), "--model", str(tiny_model_dir), "--device", "cpu",
               "--json", "--modes", "unknown", "--steps", "4", "--max-tokens", "12", "--slot-start-tokens", "0"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["settings"]["slot_start_tokens"] is None


@pytest.mark.parametrize("mode", ["unknown", "editor"])
def test_concurrent_tasks_share_steps_and_score_as_serial(tiny_model_dir, mode):
    tasks = [Task(task_id=f"C/{i}", prompt=f"def value_{i}(x):\n    y = x * {i}\n    return ", suffix="\n",
                  canonical_solution="y", test=f"def check(f):\n    assert f(2) == {2 * i}\n", entry_point=f"value_{i}")
             for i in range(10)]
    denoiser = load_model(tiny_model_dir, "cpu")
    settings = DecodeSettings(steps=4)
    serial = evaluate(Engine(denoiser), tasks, mode, settings, 8, concurrency=1)
    engine = Engine(denoiser, step_slack=float("inf"))      # share every step it can
    shared = evaluate(engine, tasks, mode, settings, 8, concurrency=5)     # the editor mode plans in 5 threads
    assert [s["completion"] for s in shared.samples] == [s["completion"] for s in serial.samples]
    assert [s["task_id"] for s in shared.samples] == [t.task_id for t in tasks]
    assert shared.passed == serial.passed and shared.mean_steps == serial.mean_steps
    stats = engine.scheduler.stats()
    assert stats["largestBatch"] > 1 and stats["forwardPasses"] < stats["requestSteps"]


def test_the_editor_mode_reports_what_was_shown(data, tiny_model_dir, capsys, tmp_path):
    out = tmp_path / "full.json"
    report = eval_json(capsys, data, tiny_model_dir, out, "--modes", "unknown,editor", "--steps", "2")
    editor = report["modes"]["editor"]
    assert 0 <= editor["passed"] <= editor["shown"] <= 3
    assert "shown" not in report["modes"]["unknown"] and report["settings"]["heal_whitespace"] is True
    samples = read_result(out)["modes"]["editor"]["samples"]
    for sample in samples:       # nothing shown is a failure of its own kind, never a pass
        assert (sample["completion"] is None) == (sample["reason"] == "nothing shown")
        assert not (sample["completion"] is None and sample["passed"])
    assert sum(s["completion"] is not None for s in samples) == editor["shown"]


def test_the_shipped_model_in_the_editor_shows_far_more_with_healed_blanks():
    """The editor's cursor after an indentation it typed: with the blanks left in the prefix the
    shipped model writes what the parse check refuses (19% of single lines shown), with them
    healed it completes the line (63%; docs/eval.md#the-editors-path). Measured on 80 tasks."""
    engine = Engine(load_model(None, "cpu"))
    tasks = spread_subset(load_tasks(resolve_data("single-line")), 80)
    settings = DecodeOptions(steps=16).decode_settings()
    healed = evaluate(engine, tasks, "editor", settings, 32, options=Options())
    typed = evaluate(engine, tasks, "editor", settings, 32,
                     options=Options(planner=PlannerOptions(heal_whitespace=False)))
    assert healed.shown >= 2 * max(typed.shown, 1), (healed.shown, typed.shown)
    assert healed.passed >= typed.passed


def test_the_shipped_model_mid_word_shows_far_more_with_the_typed_word_healed():
    """Two characters of the line typed (mostly inside a word: `re‸`): with the typed part as the
    slot's required start the shipped model shows about three times the completions it shows
    writing the word unaided (docs/eval.md#a-word-typed-halfway). Measured on 80 tasks."""
    engine = Engine(load_model(None, "cpu"))
    tasks = spread_subset(load_tasks(resolve_data("single-line")), 80)
    settings = DecodeOptions(steps=16).decode_settings()
    healed = evaluate(engine, tasks, "editor", settings, 32, options=Options(), typed_chars=2)
    unaided = evaluate(engine, tasks, "editor", settings, 32, typed_chars=2,
                       options=Options(planner=PlannerOptions(heal_typed=False)))
    assert healed.shown >= 2 * max(unaided.shown, 1), (healed.shown, unaided.shown)
    assert healed.passed >= unaided.passed


def test_the_shipped_model_after_a_bracket_passes_twice_as_often_with_what_was_typed_healed():
    """The line typed through its first bracket, dot, operator or quote: with the last typed token
    given back to the slot where the tokenizer would join it to what follows (`(` of `("`) and the
    line held to go on after an operator, the shipped model passes more than twice the lines
    (docs/eval.md#punctuation-typed-last: 58 against 23 of 766). Measured on 200 of those lines
    (16 against 6)."""
    engine = Engine(load_model(None, "cpu"))
    chars = "([{.=,\"'"
    tasks = spread_subset([t for t in load_tasks(resolve_data("single-line")) if t.typed_through(chars) is not None], 200)
    settings = DecodeOptions(steps=16).decode_settings()
    healed = evaluate(engine, tasks, "editor", settings, 32, options=Options(), typed_through=chars)
    unaided = evaluate(engine, tasks, "editor", settings, 32, typed_through=chars,
                       options=Options(planner=PlannerOptions(heal_typed=False)))
    assert healed.passed >= 2 * max(unaided.passed, 1), (healed.passed, unaided.passed)
    assert healed.shown > unaided.shown


def test_every_mode_reports_how_well_confidence_tells_passing_from_failing(data, tiny_model_dir, capsys, tmp_path):
    out = tmp_path / "full.json"
    report = eval_json(capsys, data, tiny_model_dir, out, "--modes", "unknown,editor", "--steps", "2")
    unknown = report["modes"]["unknown"]["confidence"]
    assert unknown["with_confidence"] == 3 and unknown["passed"] == report["modes"]["unknown"]["passed"]
    assert [g["keep"] for g in unknown["gates"]] == list(GATE_KEEPS)
    assert unknown["gates"][0]["shown"] == 3           # the lowest threshold keeps every completion
    shown = [g["shown"] for g in unknown["gates"]]
    assert shown == sorted(shown, reverse=True)
    samples = read_result(out)["modes"]["editor"]["samples"]
    assert all((s["confidence"] is None) == (s["completion"] is None) for s in samples)


def test_a_gate_above_every_confidence_shows_nothing(data, tiny_model_dir, capsys, tmp_path):
    report = eval_json(capsys, data, tiny_model_dir, tmp_path / "full.json", "--modes", "editor", "--steps", "2",
                       "--min-confidence", "1.0")
    assert report["modes"]["editor"]["shown"] == 0 and report["settings"]["min_confidence"] == 1.0


@pytest.mark.parametrize("scores, passed, expected", [
    ([0.9, 0.8, 0.2, 0.1], [True, True, False, False], 1.0),
    ([0.1, 0.2, 0.8, 0.9], [True, True, False, False], 0.0),
    ([0.5, 0.5, 0.5, 0.5], [True, False, True, False], 0.5),     # ties count half
    ([0.9, 0.3, 0.6], [True, True, False], 0.5),
    ([0.4, 0.7], [True, True], None),                           # no failing completion to rank against
])
def test_auroc(scores, passed, expected):
    assert auroc(scores, passed) == expected


def test_the_editor_mode_reports_what_alternatives_add(data, tiny_model_dir, capsys, tmp_path):
    out = tmp_path / "full.json"
    report = eval_json(capsys, data, tiny_model_dir, out, "--modes", "unknown,editor", "--steps", "2",
                       "--alternatives", "4")
    editor, unknown = report["modes"]["editor"], report["modes"]["unknown"]
    assert "alternatives" not in unknown and report["settings"]["alternatives"] == 4
    offered = editor["alternatives"]
    assert offered["passed_first"] == editor["passed"] <= offered["passed_any"] <= 3
    samples = read_result(out)["modes"]["editor"]["samples"]
    assert sum(len(s["alternatives"]) for s in samples) == offered["alternatives_shown"] <= 3 * 3
    assert sum(bool(s["alternatives"]) for s in samples) == offered["tasks_with_alternatives"]
    for sample in samples:
        assert sample["completion"] not in sample["alternatives"]
        assert sample["completion"] is not None or sample["alternatives"] == []


def test_a_deadline_stops_starting_tasks_and_scores_what_was_infilled(tiny_model_dir):
    # The GPU job's eval box: what time allowed is scored, with how many tasks there were to run.
    tasks = [Task(task_id=f"D/{i}", prompt="def value():\n    return ", suffix="\n", canonical_solution=str(i),
                  test=f"def check(f):\n    assert f() == {i}\n", entry_point="value") for i in range(20)]
    engine = Engine(load_model(tiny_model_dir, "cpu"))
    settings = DecodeSettings(steps=2)
    late = evaluate(engine, tasks, "oracle", settings, 4, deadline=time.monotonic())
    assert late.tasks == 0 and late.planned == 20 and late.pass_at_1 == 0.0 and late.samples == []
    assert late.to_json()["planned"] == 20
    ample = evaluate(engine, tasks, "oracle", settings, 4, deadline=time.monotonic() + 3600)
    assert ample.tasks == 20 and ample.planned is None and "planned" not in ample.to_json()
    assert [s["task_id"] for s in ample.samples] == [t.task_id for t in tasks]    # batches keep the order


def test_every_prefix_of_the_spread_order_covers_the_file():
    tasks = [Task(task_id=str(i), prompt="", suffix="", canonical_solution="", test="", entry_point="f")
             for i in range(1033)]
    order = [int(t.task_id) for t in spread_order(tasks)]
    assert sorted(order) == list(range(1033))
    for k in (2, 8, 100):     # the first k tasks leave no stretch of the file much longer than 1033/k unsampled
        picked = sorted(order[:k]) + [1033 + order[0]]
        assert max(b - a for a, b in zip(picked, picked[1:])) <= 2 * 1033 / k + 1, k


def test_max_seconds_runs_the_spread_order_and_reports_what_it_stopped(data, tiny_model_dir, capsys, tmp_path):
    out = tmp_path / "full.json"
    report = eval_json(capsys, data, tiny_model_dir, out, "--steps", "2", "--max-seconds", "3600")
    assert "stopped_by_time" not in report and all(m["tasks"] == 3 for m in report["modes"].values())
    assert [s["task_id"] for s in read_result(out)["modes"]["unknown"]["samples"]] == ["T/0", "T/2", "T/1"]
    assert report["length_gap_points"] == round(100 * (report["modes"]["oracle"]["pass@1"] - report["pass@1"]), 1)
    assert main(["humaneval-infilling", "--data", str(data), "--model", str(tiny_model_dir), "--device", "cpu",
                 "--max-seconds", "0"]) == 1
    assert "--max-seconds must be positive" in capsys.readouterr().err


def test_the_length_gap_compares_the_tasks_both_modes_ran():
    def mode(name, passed):
        return ModeResult(mode=name, tasks=len(passed), passed=sum(passed), mean_steps=1, tokens_per_step=1,
                          mean_latency_ms=1, seconds=1, samples=[{"passed": p} for p in passed])

    # oracle stopped by time after 2 tasks: the gap is over those 2 (1 - 0 of 2 = 50 points).
    assert length_gap_points(mode("unknown", [False, False, True, True]), mode("oracle", [True, False])) == 50.0
    assert length_gap_points(mode("unknown", []), mode("oracle", [True])) is None

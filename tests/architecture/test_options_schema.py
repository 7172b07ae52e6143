"""One options schema (dllm_lsp/options.py): the editors' settings and the docs are generated from
it and must not drift; client objects are structured strictly."""
from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from dllm_lsp.engine.engine import DEFAULT_CONTEXT_TOKENS
from dllm_lsp.engine.types import CacheSettings, DecodeSettings
from dllm_lsp.multisite.holes import find_holes
from dllm_lsp.options import BY_WIRE, OPTIONS, Options, SettingsError, written_files
from dllm_lsp.planner.spans import PlannerSettings

REPO = Path(__file__).resolve().parents[2]


def test_every_generated_file_is_up_to_date():
    stale = [str(p.relative_to(REPO)) for p, want in written_files(REPO).items()
             if p.read_text(encoding="utf-8") != want]
    assert not stale, f"run `python -m dllm_lsp.options --write`: {stale} drifted from the schema"


def test_vscode_forwards_every_option_with_the_schemas_defaults():
    settings_ts = (REPO / "editors/vscode/src/settings.ts").read_text(encoding="utf-8")
    keys_block = settings_ts[settings_ts.index("const SERVER_KEYS"):]
    keys_block = keys_block[: keys_block.index("];")]
    forwarded = re.findall(r'"(\w+)"', keys_block)
    assert forwarded == [o.wire for o in OPTIONS]
    properties = json.loads((REPO / "editors/vscode/package.json").read_text())["contributes"]["configuration"][
        "properties"]
    for option in OPTIONS:
        entry = properties[f"dllm.{option.wire}"]
        assert entry["default"] == option.default, option.wire
        assert option.kind in (entry["type"] if isinstance(entry["type"], list) else [entry["type"]])


def test_neovim_defaults_are_schema_options_with_the_schemas_defaults():
    config = (REPO / "editors/nvim/lua/dllm/config.lua").read_text(encoding="utf-8")
    table = re.search(r"^\s*server = \{(.*)\},", config, re.MULTILINE).group(1)
    pairs = dict(re.findall(r"(\w+) = '([^']*)'", table))
    assert pairs, "the Neovim plugin's server defaults were not found"
    for key, value in pairs.items():
        assert key in BY_WIRE, f"Neovim sends {key!r}, which is no server option"
        assert BY_WIRE[key].default == value, key


def test_protocol_docs_table_lists_every_option_once():
    protocol = (REPO / "docs/protocol.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| (\w+) \| `([^`]*)` \|", protocol, re.MULTILINE)
    assert [r[0] for r in rows] == [o.wire for o in OPTIONS]
    for wire, group, default in rows:
        assert BY_WIRE[wire].group == group
        assert json.loads(default) == BY_WIRE[wire].default


def test_wire_names_are_unique_and_groups_are_the_four():
    assert len(BY_WIRE) == len(OPTIONS)
    assert {o.group for o in OPTIONS} == {"planner", "decode", "model", "server"}


def test_client_objects_are_structured_strictly():
    base = Options()
    merged = base.merged({"dllm": {"steps": 4, "remaskBelow": 0.3, "confidence": "margin", "unknown": 1,
                                   "cache": "none", "languages": {"markdown": False}}})
    assert merged.decode.steps == 4 and merged.decode.remask_below == 0.3 and merged.decode.confidence == "margin"
    assert merged.model.cache_settings().mode == "none"
    assert not merged.planner.language_enabled("markdown") and merged.planner.language_enabled("python")
    # spelled as the document or as the grammar: `Python`, `tsx` for typescriptreact
    spelled = base.merged({"languages": {"python": False, "typescriptreact": False, "*": True}}).planner
    assert not spelled.language_enabled("Python") and not spelled.language_enabled(" python ")
    assert not spelled.language_enabled("tsx") and spelled.language_enabled("typescript")
    assert base.decode.steps == 16                      # a merge makes a copy
    assert base.merged({"max_span_tokens": 20}).planner.max_span_tokens == 20   # snake_case is accepted too
    decode = merged.decode.decode_settings()
    assert (decode.steps, decode.confidence, decode.remask_below) == (4, "margin", 0.3)
    for options, message in [({"steps": "8"}, "steps must be an integer"), ({"steps": 0}, "steps must be within 1..256"),
                             ({"threshold": True}, "threshold must be a number"),
                             ({"cache": "sometimes"}, "cache must be one of"),
                             ({"confidence": "vibes"}, "confidence must be one of"),
                             ({"remaskBelow": 1.5}, "remaskBelow must be within 0..1"),
                             ({"temperature": float("nan")}, "temperature must be within 0.05..5.0"),   # NaN passed < and >
                             ({"languages": {"python": "yes"}}, "languages['python'] must be a boolean"),
                             ({"languages": ["python"]}, "languages must be a JSON object, not ['python']"),
                             ({"model": ""}, "model must be a non-empty string"), (["steps"], "JSON object"),
                             ({"holeMarker": " "}, "holeMarker must be a non-empty string")]:
        with pytest.raises(SettingsError, match=re.escape(message)):
            base.merged(options)


def test_the_settings_types_defaults_are_the_schemas():
    """The lower layers' settings types keep defaults of their own (tests and benches build them
    bare); they must be the schema's, or code built on them measures another configuration (the
    planner's context was 6,000 characters bare against the server's 6,144)."""
    options = Options()
    assert PlannerSettings() == options.planner.planner_settings()
    assert DecodeSettings() == options.decode.decode_settings()
    assert CacheSettings() == options.model.cache_settings()
    assert DEFAULT_CONTEXT_TOKENS == options.planner.context_tokens
    holes = inspect.signature(find_holes).parameters
    assert (holes["marker"].default, holes["span_tokens"].default, holes["line_tokens"].default) == (
        options.planner.hole_marker, options.planner.max_span_tokens, options.planner.max_line_tokens)


def test_thresholds_are_on_the_confidence_kinds_scale():
    entropy = Options().merged({"confidence": "entropy", "threshold": -0.5, "remaskBelow": -2.0})
    assert entropy.decode.decode_settings().threshold == -0.5
    with pytest.raises(SettingsError, match="threshold must be <= 0 with entropy"):
        Options().merged({"confidence": "entropy"})      # the default 0.9 means nothing for -entropy
    with pytest.raises(SettingsError, match="threshold must be within 0..1 with margin"):
        Options().merged({"confidence": "margin", "threshold": -0.5})
    with pytest.raises(SettingsError, match="minConfidence must be within 0..1 with prob"):
        Options().merged({"minConfidence": 1.5})
    assert Options().merged({"confidence": "entropy", "threshold": -0.5,
                             "minConfidence": -1.0}).decode.min_confidence == -1.0


def test_a_client_object_applies_option_by_option():
    # One bad setting used to drop the whole object: the client's model and device with it.
    options, refusals, unknown = Options().applied(
        {"dllm": {"model": "dllm-embedded-30m", "device": "cpu", "contextTokens": 300, "steps": "8", "Steps": 3}})
    assert (options.model.model, options.model.device, options.planner.context_tokens) == ("dllm-embedded-30m", "cpu", 300)
    assert options.decode.steps == 16 and refusals == ["steps ignored: steps must be an integer, not '8'"]
    assert unknown == ["Steps"]
    # a bad value keeps the value before, not the default
    before = Options().merged({"steps": 4})
    after, refusals, _ = before.applied({"steps": 0, "alternatives": 2})
    assert (after.decode.steps, after.decode.alternatives) == (4, 2) and refusals == ["steps ignored: steps must be within 1..256"]
    # a check across options blames the option sent, and options valid together apply together
    lone, refusals, _ = Options().applied({"confidence": "entropy", "maxLineTokens": 20})
    assert lone.decode.confidence == "prob" and lone.planner.max_line_tokens == 20
    assert len(refusals) == 1 and refusals[0].startswith("confidence ignored: threshold must be <= 0 with entropy")
    both, refusals, _ = Options().applied({"confidence": "entropy", "threshold": -0.5, "steps": True})
    assert (both.decode.confidence, both.decode.threshold, both.decode.steps) == ("entropy", -0.5, 16)
    assert refusals == ["steps ignored: steps must be an integer, not True"]
    assert Options().applied({"token": "secret"})[1:] == ([], [])      # read by the TCP front
    assert Options().applied(None) == (Options(), [], [])
    with pytest.raises(SettingsError, match="JSON object"):
        Options().applied(["steps"])


def test_the_planner_budget_derives_from_the_context_tokens():
    small = Options().merged({"contextTokens": 100}).planner.planner_settings()
    large = Options().merged({"contextTokens": 2000}).planner.planner_settings()
    assert small.context_chars < large.context_chars

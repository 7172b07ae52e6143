"""Every option of dllm-lsp, declared once: the schema the server, the CLI, the eval and the
editors' settings are read from or checked against (tests/architecture/test_options_schema.py).

Options come in groups: `planner` (what is masked, how much context), `decode` (how the loop
commits tokens), `model` (what is loaded and how it caches) and `server` (how answers reach the
editor). On the wire (LSP `initializationOptions`, `workspace/didChangeConfiguration` under
`dllm`, the VS Code settings `dllm.<name>`) each option has one flat camelCase name, unique across
groups, so clients keep a flat settings object; in Python the groups are attrs classes, and
cattrs structures the wire object into them with strict types (no "8" for 8) and the validators
below.
"""
from __future__ import annotations

import argparse
import json
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import cattrs
from cattrs.gen import make_mapping_structure_fn

from dllm_lsp.engine.types import CacheSettings, DecodeSettings
from dllm_lsp.planner.spans import PlannerSettings
from dllm_lsp.syntax.languages import normalize_language_id

# Context characters per context token: the planner cuts text by characters (cheap, before
# tokenizing), the engine cuts the canvas by tokens; code runs 3-4 characters per token, so a
# character budget of ~6 per token never cuts more than the token budget would.
CHARS_PER_TOKEN = 6
# The most context tokens a client may ask for: 2^20, above the positions of every checkpoint
# family the loader takes (docs/models.md), which cap the budget anyway. Unbounded, 10^12 was
# taken and reported by dllm/status as the budget.
MAX_CONTEXT_TOKENS = 1_048_576


class SettingsError(ValueError):
    """An option has the wrong type or an impossible value."""


class OptionValueError(ValueError):
    """A validator's refusal, naming the attribute it is about: attrs runs validators in the
    group's __init__, so cattrs can place the error on the group only."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def doc(text: str) -> dict:
    return {"doc": text}


def _in(low, high=None):
    """A range validator whose message names the option as clients spell it."""
    def check(instance, attribute, value) -> None:
        if not (low <= value and (high is None or value <= high)):   # NaN is in no range
            bound = f"within {low}..{high}" if high is not None else f">= {low}"
            raise OptionValueError(attribute.name, f"{snake_to_camel(attribute.name)} must be {bound}")
    return check


def _non_empty(instance, attribute, value) -> None:
    # Blank counts as empty: a `holeMarker` of " " was taken, and every code action then failed.
    if not value.strip():
        raise OptionValueError(attribute.name, f"{snake_to_camel(attribute.name)} must be a non-empty string")


@attrs.frozen
class PlannerOptions:
    max_span_tokens: int = attrs.field(default=64, validator=_in(1, 512),
                                       metadata=doc("longest multi-line span (block bodies, new lines)"))
    max_line_tokens: int = attrs.field(default=32, validator=_in(1, 512),
                                       metadata=doc("longest one-line span (line tails, arguments)"))
    context_tokens: int = attrs.field(default=1024, validator=_in(16, MAX_CONTEXT_TOKENS),
                                      metadata=doc("context budget around the cursor, in tokens: the planner's "
                                                   "text window, the companion slot and the canvas all derive from "
                                                   f"it; 16..{MAX_CONTEXT_TOKENS:,}, capped by the model's positions"))
    companion_edits: bool = attrs.field(default=False, metadata=doc(
        "fill one more slot after the imports in the same run; a valid new import that the completion "
        "uses comes back as `additionalTextEdits` / an accept command. Off by default: on the shipped "
        "model it cost 17% of the completions that pass and 1.7x the steps "
        "([multisite.md](multisite.md#companion-edits))"))
    heal_whitespace: bool = attrs.field(default=True, metadata=doc(
        "token healing: the spaces and tabs typed before the cursor on its line go to the model, which "
        "writes them itself; a prefix that ends in blanks made the shipped model write junk "
        "([planner.md](planner.md#token-healing))"))
    heal_typed: bool = attrs.field(default=True, metadata=doc(
        "what was typed on the line and left out of the prefix (a word typed halfway, the blanks "
        "before the cursor, punctuation the tokenizer joins to what follows, as `(` of `(\"`) is "
        "written first: until it is, only tokens that agree with it are proposed, and typed blanks "
        "are followed by text; off, the model writes it unaided and a completion that does not "
        "begin with a typed word is not shown ([eval.md](eval.md#a-word-typed-halfway), "
        "[planner.md](planner.md#punctuation-typed-last))"))
    hole_marker: str = attrs.field(default="TODO", validator=_non_empty, metadata=doc(
        'the marker comment "Fill holes" treats as a hole, besides each language\'s placeholders'))
    languages: dict[str, bool] = attrs.field(factory=dict, metadata=doc(
        'per-language enable, e.g. `{"markdown": false}`; unknown languages use line rules'))

    def context_budget(self, model_context: int | None = None) -> int:
        """The context budget in force: `context_tokens`, capped by the positions of the model that
        will run the request (None: not known). Completions and multi-site fills both size by it."""
        return self.context_tokens if model_context is None else min(self.context_tokens, model_context)

    def span_tokens(self, model_max_slot: int | None = None) -> tuple[int, int]:
        """(multi-line, one-line) slot sizes in force: the options', no wider than the widest slot
        the model was trained on (None: not known). The shipped preview, trained on slots of 48
        tokens at most, was planned 64-token block bodies."""
        cap = model_max_slot or max(self.max_span_tokens, self.max_line_tokens)
        return min(self.max_span_tokens, cap), min(self.max_line_tokens, cap)

    def planner_settings(self, context_tokens: int | None = None, model_max_slot: int | None = None) -> PlannerSettings:
        """`context_tokens`: the budget in force (`context_tokens` capped by the model's positions);
        `model_max_slot`: the model's widest trained slot (span_tokens)."""
        budget = self.context_tokens if context_tokens is None else context_tokens
        span, line = self.span_tokens(model_max_slot)
        return PlannerSettings(max_span_tokens=span, max_line_tokens=line,
                               context_chars=budget * CHARS_PER_TOKEN, heal_whitespace=self.heal_whitespace,
                               heal_typed=self.heal_typed)

    def language_enabled(self, language_id: str) -> bool:
        """The option's entry for the language, spelled either way (`Python`, `tsx` and
        `typescriptreact` are the grammars' names for what the documents say), else `"*"`'s."""
        wanted = normalize_language_id(language_id)
        for key, enabled in self.languages.items():
            if key != "*" and normalize_language_id(key) == wanted:
                return enabled
        return self.languages.get("*", True)


def _on_the_confidence_scale(instance: DecodeOptions, attribute, value) -> None:
    """threshold and remaskBelow are confidences: 0..1 for prob and margin, <= 0 for entropy
    (its confidence is the negative entropy)."""
    name = snake_to_camel(attribute.name)
    if value is None:
        return
    if instance.confidence == "entropy":
        if not value <= 0:
            raise OptionValueError(attribute.name, f"{name} must be <= 0 with entropy confidences (they are negative "
                                   f"entropies: set {name} with confidence, -0.5 say)")
    elif not 0.0 <= value <= 1.0:
        raise OptionValueError(attribute.name, f"{name} must be within 0..1 with {instance.confidence} confidences")


@attrs.frozen
class DecodeOptions:
    # 16: one token a step in a slot starting 16 wide. With 8, each step had to commit two tokens
    # whatever their confidence, and the editor showed and passed half as many single lines
    # (docs/results/eval-steps/) for 1.2x the passes on average.
    steps: int = attrs.field(default=16, validator=_in(1, 256), metadata=doc("denoising steps (upper bound)"))
    threshold: float = attrs.field(default=0.9, validator=_on_the_confidence_scale,
                                   metadata=doc("confidence needed to commit a token early"))
    confidence: Literal["prob", "margin", "entropy"] = attrs.field(default="prob", metadata=doc(
        "how a position's confidence is scored: top-1 probability, top-1 minus top-2 probability, or "
        "negative entropy ([eval.md](eval.md#remasking-and-confidence))"))
    remask_below: float | None = attrs.field(default=None, validator=_on_the_confidence_scale, metadata=doc(
        "re-open committed tokens whose confidence fell below this (`null`: never); diffusion's "
        "error correction ([eval.md](eval.md#remasking-and-confidence))"))
    slot_start_tokens: int | None = attrs.field(default=None, validator=attrs.validators.optional(_in(0, 512)),
                                                metadata=doc(
        "a slot starts this many tokens wide and doubles while the model fills it, up to `maxLineTokens` / "
        "`maxSpanTokens`; `0`: full width from the start; `null`: the default, 16 on every device "
        "(measured on a CPU and an H200: [serving.md](serving.md#slots-that-grow))"))
    ends_balanced: bool = attrs.field(default=False, metadata=doc(
        "a span may end only where it has closed the brackets, strings and comments it opened; off by "
        "default: the shipped CPU model, refused an end, mostly writes line breaks "
        "([eval.md](eval.md#ends-only-where-balanced))"))

    min_confidence: float | None = attrs.field(default=None, validator=_on_the_confidence_scale, metadata=doc(
        "show a completion only when the tokens it was made of were committed at least this confident on "
        "average (the `confidence` kind's scale; `null`: always show); off by default: on the shipped CPU "
        "model confidence barely tells passing lines from failing ones "
        "([eval.md](eval.md#a-confidence-gate))"))

    alternatives: int = attrs.field(default=1, validator=_in(1, 8), metadata=doc(
        "suggestions per completion: the model's most likely one and up to N-1 sampled alternatives, "
        "decoded together in one batch; the distinct ones that post-processing lets through are offered "
        "for the editor to cycle through (VS Code: Alt+]). Each costs about one more request's span rows a "
        "step (little on a GPU, about that much on a CPU), and the first suggestion takes at most one model "
        "pass more than alone (twice its passes with DreamOn-style checkpoints: "
        "[protocol.md](protocol.md#alternatives))"))
    temperature: float = attrs.field(default=0.8, validator=_in(0.05, 5.0), metadata=doc(
        "sampling temperature of the alternatives (the first suggestion is always the greedy one)"))

    def decode_settings(self, alternatives: int | None = None) -> DecodeSettings:
        """`alternatives`: how many candidates to decode instead of the option's (a joint fill of
        several sites offers one edit, so it asks for 1)."""
        n = self.alternatives if alternatives is None else alternatives
        sampled = n > 1
        return DecodeSettings(steps=self.steps, threshold=self.threshold, confidence=self.confidence,
                              remask_below=self.remask_below, slot_start_tokens=self.slot_start_tokens,
                              ends_balanced=self.ends_balanced, n=n,
                              temperature=self.temperature if sampled else 0.0, greedy_first=sampled)


@attrs.frozen
class ModelOptions:
    model: str = attrs.field(default="default", validator=_non_empty,
                             metadata=doc("model folder path, or the name of a shipped model"))
    device: str = attrs.field(default="auto", validator=_non_empty, metadata=doc("`auto`, `cpu`, `cuda`, `cuda:N`"))
    cache: Literal["dual", "reuse", "none"] = attrs.field(default="dual", metadata=doc(
        'open checkpoints: `"dual"` (Fast-dLLM dual cache), `"reuse"` (the dual cache, and the context '
        'kept across requests: typing recomputes only what changed) or `"none"` (full passes)'))
    cache_refresh_every: int = attrs.field(default=0, validator=_in(0), metadata=doc(
        "dual cache: recompute prefix/suffix keys every N steps (0: only at the first step)"))

    def cache_settings(self) -> CacheSettings:
        return CacheSettings(self.cache, self.cache_refresh_every)


@attrs.frozen
class ServerOptions:
    stream_interval_ms: int = attrs.field(default=50, validator=_in(0),
                                          metadata=doc("least time between two streamed progress reports"))


@attrs.frozen
class Options:
    planner: PlannerOptions = attrs.field(factory=PlannerOptions)
    decode: DecodeOptions = attrs.field(factory=DecodeOptions)
    model: ModelOptions = attrs.field(factory=ModelOptions)
    server: ServerOptions = attrs.field(factory=ServerOptions)

    def merged(self, options: Any) -> Options:
        """A copy with the wire object `options` applied (its `dllm` section when it has one);
        unknown keys are ignored, a bad value raises SettingsError and changes nothing (the CLI's
        and the eval's flags: a bad one is an error)."""
        sent = _sent(options)
        try:
            return self._with(sent)
        except Exception as exc:   # cattrs gathers every bad field into one exception group
            raise SettingsError(_describe(exc)) from None

    def applied(self, options: Any) -> tuple[Options, list[str], list[str]]:
        """What a client's settings make of these options: (options, refusals, unknown keys).
        Each option is taken on its own: the valid ones apply, a bad one keeps its value and its
        refusal says why (an editor's one bad setting must not cost its user the model and device
        it chose). SettingsError only when `options` is not an object at all."""
        sent = _sent(options)
        refusals: list[str] = []
        while True:
            try:
                return self._with(sent), refusals, _unknown_keys(options)
            except Exception as exc:
                failures = list(_failures(exc, ()))
            blamed = {key: text for key, text in failures if key in sent}
            if not blamed:
                # A check across options failed on one the client left alone (its threshold, on
                # the scale of the confidence kind it changed): blame each sent option that fails
                # by itself, else everything that was sent.
                for key in sent:
                    try:
                        self._with({key: sent[key]})
                    except Exception as alone:
                        blamed[key] = _describe(alone)
                blamed = blamed or {key: "; ".join(text for _, text in failures) for key in sent}
            for key, text in blamed.items():
                del sent[key]
                refusals.append(f"{BY_FIELD[key].wire} ignored: {text}")

    def _with(self, sent: dict[tuple[str, str], Any]) -> Options:
        nested = _converter.unstructure(self)
        for (group, field), value in sent.items():
            nested[group][field] = value
        return _converter.structure(nested, Options)
    def wire(self) -> dict[str, Any]:
        """The flat camelCase object a client sends (every option)."""
        nested = _converter.unstructure(self)
        return {o.wire: nested[o.group][o.field] for o in OPTIONS}


@attrs.frozen
class Option:
    group: str        # planner / decode / model / server
    field: str        # snake_case attribute
    wire: str         # camelCase name on the wire and in editor settings
    default: Any
    kind: str         # JSON type: integer, number, boolean, string, object
    doc: str
    choices: tuple[str, ...] = ()
    nullable: bool = False


def snake_to_camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def _json_kind(tp: Any) -> tuple[str, tuple[str, ...], bool]:
    """(JSON type, allowed strings, may be null) of an option's annotation."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    nullable = len(args) < len(typing.get_args(tp))
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return "string", tuple(args), False
    if nullable and len(args) == 1:
        return _json_kind(args[0])[0], (), True
    base = origin or tp
    kinds = {int: "integer", float: "number", bool: "boolean", str: "string", dict: "object"}
    if base not in kinds:
        raise TypeError(f"no JSON type for option annotation {tp!r}")
    return kinds[base], (), False


def _options() -> Iterator[Option]:
    for group in attrs.fields(Options):
        defaults = group.default.factory()
        for f in attrs.fields(group.type):
            kind, choices, nullable = _json_kind(f.type)
            yield Option(group.name, f.name, snake_to_camel(f.name), getattr(defaults, f.name), kind,
                         f.metadata["doc"], choices, nullable)


def _strict(kind: type, name: str, accept=None):
    """A cattrs hook that takes only JSON values of `kind` (cattrs would turn "8" into 8)."""
    def hook(value, _type):
        ok = accept(value) if accept else isinstance(value, kind) and not isinstance(value, bool)
        if not ok:
            raise TypeError(f"must be {name}, not {value!r}")
        return kind(value)
    return hook


def _structure_choice(value, tp):
    choices = typing.get_args(tp)
    if value not in choices:
        raise ValueError(f"must be one of {', '.join(map(repr, choices))}, not {value!r}")
    return value


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook_func(lambda tp: typing.get_origin(tp) is typing.Literal, _structure_choice)
    converter.register_structure_hook(int, _strict(int, "an integer"))
    converter.register_structure_hook(
        float, _strict(float, "a number", lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)))
    converter.register_structure_hook(bool, _strict(bool, "a boolean", lambda x: isinstance(x, bool)))
    converter.register_structure_hook(str, _strict(str, "a string", lambda x: isinstance(x, str)))
    converter.register_structure_hook_factory(lambda tp: typing.get_origin(tp) is dict,
                                              lambda tp: _object_first(make_mapping_structure_fn(tp, converter)))
    return converter


def _object_first(mapping):
    """cattrs' own structuring of a dict field, once the value is a JSON object (a list once gave
    "'list' object has no attribute 'items'")."""
    def hook(value, tp):
        if not isinstance(value, dict):
            raise TypeError(f"must be a JSON object, not {value!r}")
        return mapping(value, tp)
    return hook


_converter = _make_converter()

# The types are annotations (strings) until resolved: resolve once, so cattrs sees real types.
for _cls in (PlannerOptions, DecodeOptions, ModelOptions, ServerOptions, Options):
    attrs.resolve_types(_cls)

OPTIONS: tuple[Option, ...] = tuple(_options())
BY_WIRE = {o.wire: o for o in OPTIONS}
BY_FIELD = {(o.group, o.field): o for o in OPTIONS}
NOT_OPTIONS = frozenset({"token"})   # initializationOptions read elsewhere (server/auth.py)


def _section(options: Any) -> dict:
    """The client's settings object: its `dllm` section when it has one (`null`: nothing set)."""
    if not isinstance(options, dict):
        raise SettingsError("options must be a JSON object")
    if "dllm" not in options:
        return options
    section = options["dllm"]
    if section is None:
        return {}
    if not isinstance(section, dict):
        # read as the whole object before, it was only "unknown options ignored: dllm" in the log
        raise SettingsError(f"the dllm section must be a JSON object, not {json.dumps(section)[:60]}")
    return section


def _sent(options: Any) -> dict[tuple[str, str], Any]:
    """{(group, field): value} of the options the client set, by either spelling (snake_case over
    camelCase when both are there). None: nothing."""
    if options is None:
        return {}
    section = _section(options)
    sent = {}
    for option in OPTIONS:
        for key in (option.wire, option.field):
            if key in section:
                sent[(option.group, option.field)] = section[key]
    return sent


def _unknown_keys(options: Any) -> list[str]:
    if options is None:
        return []
    known = {name for o in OPTIONS for name in (o.wire, o.field)} | NOT_OPTIONS
    return sorted(str(key) for key in _section(options) if key not in known)


def _describe(exc: BaseException) -> str:
    """cattrs' tree of errors as one line: `steps must be an integer, not 'many'; ...`."""
    return "; ".join(text for _, text in _failures(exc, ())) or str(exc)


def _failures(exc: BaseException, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, str] | None, str]]:
    """((group, field) or None where unknown, message) of each bad option in cattrs' tree."""
    if hasattr(exc, "exceptions"):   # an exception group: one member per bad field
        for sub in exc.exceptions:
            notes = getattr(sub, "__notes__", [])
            name = next((str(n.name) for n in notes if hasattr(n, "name")), None)
            index = next((repr(n.index) for n in notes if hasattr(n, "index")), None)
            step = name if name is not None else index
            yield from _failures(sub, path + ((step,) if step is not None else ()))
        return
    if len(path) <= 1:
        # a validator of a group: its message names the option already
        key = (path[0], exc.field) if path and isinstance(exc, OptionValueError) else None
        yield key, str(exc)
        return
    option = BY_FIELD.get(path[:2])
    label = option.wire if option is not None else path[1]
    yield path[:2], f"{label}{''.join(f'[{p}]' for p in path[2:])} {exc}"


# --- the editors' and docs' copies of the schema ---------------------------------------------
# VS Code needs its settings declared statically in package.json, the extension forwards a list
# of keys, docs/protocol.md tables the options: all three are generated from OPTIONS
# (`python -m dllm_lsp.options --write`) and a test fails when one of them drifts.

GENERATED_BEGIN = "generated from dllm_lsp/options.py by `python -m dllm_lsp.options --write`"
_LINK = re.compile(r"\s*\(\[[^\]]*\]\([^)]*\)\)")


def plain_doc(option: Option) -> str:
    """The option's description as a sentence without the links into docs/ (VS Code shows plain text)."""
    text = _LINK.sub("", option.doc).replace("`", "")
    return text[:1].upper() + text[1:] + "."


def vscode_properties() -> dict[str, dict]:
    """package.json `contributes.configuration.properties` entries, one per option."""
    out = {}
    for o in OPTIONS:
        entry: dict[str, Any] = {"type": [o.kind, "null"] if o.nullable else o.kind, "default": o.default,
                                 "description": plain_doc(o)}
        if o.choices:
            entry["enum"] = list(o.choices)
        out[f"dllm.{o.wire}"] = entry
    return out


def typescript_block() -> str:
    kinds = {"integer": "number", "number": "number", "boolean": "boolean", "string": "string",
             "object": "Record<string, boolean>"}
    lines = [f"// --- {GENERATED_BEGIN}", "/** The server options of docs/protocol.md; names are the server's. */",
             "export interface ServerOptionsPayload {"]
    for o in OPTIONS:
        kind = " | ".join(f'"{c}"' for c in o.choices) if o.choices else kinds[o.kind]
        lines.append(f"  {o.wire}: {kind}{' | null' if o.nullable else ''};")
    lines += ["}", "", "const SERVER_KEYS: (keyof ServerOptionsPayload)[] = ["]
    lines += [f'  "{o.wire}",' for o in OPTIONS]
    lines += ["];", "// --- end of the generated part"]
    return "\n".join(lines)


def markdown_table() -> str:
    lines = [f"<!-- {GENERATED_BEGIN} -->", "| option | group | default | meaning |", "| --- | --- | --- | --- |"]
    for o in OPTIONS:
        default = "null" if o.default is None else json.dumps(o.default)
        lines.append(f"| `{o.wire}` | {o.group} | `{default}` | {o.doc} |")
    lines.append("<!-- end of the generated table -->")
    return "\n".join(lines)


def _replace_between(text: str, start: str, end: str, block: str, where: str) -> str:
    a = text.find(start)
    b = text.find(end, a)
    if a < 0 or b < 0:
        raise ValueError(f"{where} has no generated part ({start!r} ... {end!r})")
    line_start = text.rfind("\n", 0, a) + 1
    return text[:line_start] + block + text[b + len(end):]


# The keys editors keep in the `dllm` settings section beside the options (VS Code: dllm.enabled,
# dllm.server.* with its token, dllm.streaming): the server leaves them out of a pulled section,
# and the generated package.json keeps them, nothing else.
EDITOR_SETTINGS = frozenset({"enabled", "server", "streaming"})


def written_files(repo: Path) -> dict[Path, str]:
    """Each generated file's path and the content it should have."""
    package = repo / "editors" / "vscode" / "package.json"
    data = json.loads(package.read_text(encoding="utf-8"))
    properties = data["contributes"]["configuration"]["properties"]
    ours = vscode_properties()
    # Keep the extension's own settings (dllm.enabled, dllm.server.*, dllm.streaming) where they
    # are, and nothing else: a renamed option's old key stayed for good (dllm.healTypedWord,
    # offered in the Settings UI, read by nobody).
    merged = {k: v for k, v in properties.items()
              if k not in ours and k.removeprefix("dllm.").split(".")[0] in EDITOR_SETTINGS}
    merged.update(ours)
    data["contributes"]["configuration"]["properties"] = merged
    settings_ts = repo / "editors" / "vscode" / "src" / "settings.ts"
    protocol = repo / "docs" / "protocol.md"
    return {
        package: json.dumps(data, indent=2, ensure_ascii=False) + "\n",
        settings_ts: _replace_between(settings_ts.read_text(encoding="utf-8"), f"// --- {GENERATED_BEGIN}",
                                      "// --- end of the generated part", typescript_block(), str(settings_ts)),
        protocol: _replace_between(protocol.read_text(encoding="utf-8"), f"<!-- {GENERATED_BEGIN} -->",
                                   "<!-- end of the generated table -->", markdown_table(), str(protocol)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dllm_lsp.options", description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the generated parts in the repository")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args(argv)
    if not args.write:
        print(markdown_table())
        return 0
    for path, content in written_files(args.repo).items():
        if path.read_text(encoding="utf-8") != content:
            path.write_text(content, encoding="utf-8")
            print(f"updated {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

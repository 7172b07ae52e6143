"""Server options: a typed model with defaults, read from initializationOptions and from
workspace/didChangeConfiguration (either the whole object or its `dllm` section)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Any


class SettingsError(ValueError):
    """An option has the wrong type or an impossible value."""


@dataclass(frozen=True)
class ServerSettings:
    model: str = "default"
    device: str = "auto"
    max_span_tokens: int = 64
    max_line_tokens: int = 32
    steps: int = 8
    threshold: float = 0.9
    context_tokens: int = 1024
    languages: dict[str, bool] = field(default_factory=dict)
    stream_interval_ms: int = 50
    companion_edits: bool = True        # an extra slot after the imports for an import the completion needs
    hole_marker: str = "TODO"           # marker comment that "Fill holes" treats as a hole
    cache: str = "dual"                 # open checkpoints: "dual" (Fast-dLLM dual cache) or "none"
    cache_refresh_every: int = 0        # dual cache: recompute the context every N steps (0: never)

    def language_enabled(self, language_id: str) -> bool:
        return self.languages.get(language_id, self.languages.get("*", True))

    def merged(self, options: Any) -> "ServerSettings":
        """A copy with `options` (camelCase or snake_case keys) applied; unknown keys are ignored."""
        if options is None:
            return self
        if not isinstance(options, dict):
            raise SettingsError("options must be a JSON object")
        if isinstance(options.get("dllm"), dict):
            options = options["dllm"]
        changes = {}
        for f in fields(self):
            for key in (f.name, snake_to_camel(f.name)):
                if key in options:
                    changes[f.name] = coerce(f.name, options[key], getattr(self, f.name))
        updated = replace(self, **changes)
        updated.validate()
        return updated

    def validate(self) -> None:
        if not 1 <= self.max_span_tokens <= 512 or not 1 <= self.max_line_tokens <= 512:
            raise SettingsError("maxSpanTokens and maxLineTokens must be within 1..512")
        if not 1 <= self.steps <= 256:
            raise SettingsError("steps must be within 1..256")
        if not 0.0 <= self.threshold <= 1.0:
            raise SettingsError("threshold must be within 0..1")
        if self.context_tokens < 16:
            raise SettingsError("contextTokens must be at least 16")
        if self.stream_interval_ms < 0:
            raise SettingsError("streamIntervalMs must be >= 0")
        if self.cache not in ("dual", "none"):
            raise SettingsError('cache must be "dual" or "none"')
        if self.cache_refresh_every < 0:
            raise SettingsError("cacheRefreshEvery must be >= 0")


def snake_to_camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), name)


def coerce(name: str, value: Any, default: Any) -> Any:
    camel = snake_to_camel(name)
    if isinstance(default, bool) or isinstance(default, dict):
        if not isinstance(value, type(default)):
            raise SettingsError(f"{camel} must be a {'boolean' if isinstance(default, bool) else 'JSON object'}")
        if isinstance(default, dict) and not all(isinstance(v, bool) for v in value.values()):
            raise SettingsError(f"{camel} maps language ids to true/false")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingsError(f"{camel} must be an integer")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SettingsError(f"{camel} must be a number")
        return float(value)
    if not isinstance(value, str) or not value:
        raise SettingsError(f"{camel} must be a non-empty string")
    return value

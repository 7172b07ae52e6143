"""One decoder for the params of the custom requests and commands (dllm/*, dllm.*).

pygls hands a custom method's params over as namedtuples; they are turned back into JSON values
and structured with lsprotocol's converter into the attrs classes below (camelCase on the wire),
so a malformed request is answered with InvalidParams naming the bad field, never a crash.
"""
from __future__ import annotations

import json
import typing
from typing import Any, TypeVar

import attrs
from cattrs import transform_error
from cattrs.v import format_exception
from cattrs import Converter
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.protocol import default_converter

T = TypeVar("T")


class ParamError(ValueError):
    """A param we checked ourselves; its message is the one the client reads."""


def _position(data: Any, _cls: type) -> types.Position:
    # lsprotocol's hook turns a line of 1.5, "3" or true into 1, 3 and 1: a client that sends them
    # has a bug, and a completion at another line than it meant would hide it
    if not isinstance(data, dict):
        raise ParamError("must be an object {line, character}")
    for key in ("line", "character"):
        if type(data.get(key)) is not int:
            raise ParamError(f"{key} must be an integer, not {json.dumps(data.get(key))}")
    return types.Position(line=data["line"], character=data["character"])


def strict_converter() -> Converter:
    """pygls' converter, but a Position takes only JSON integers (the server's and our params'),
    a client's answer to workspace/applyEdit says `applied` with a JSON boolean ("yes" and 1
    were read as applied), and its answer to workspace/configuration is a JSON array."""
    converter = default_converter()
    converter.register_structure_hook(types.Position, _position)
    apply_result = converter.get_structure_hook(types.ApplyWorkspaceEditResult)

    def applied(data: Any, cls: type) -> types.ApplyWorkspaceEditResult:
        if not isinstance(data, dict) or type(data.get("applied")) is not bool:
            raise ParamError("applied must be a boolean")
        return apply_result(data, cls)

    converter.register_structure_hook(types.ApplyWorkspaceEditResult, applied)
    configuration = converter.get_structure_hook(types.ConfigurationResponse)

    def configuration_answer(data: Any, cls: type) -> types.ConfigurationResponse:
        # LSP: an array, one value per item asked for. lsprotocol's hook read the string "fast" as
        # four sections ("f", "a", ...) and `{}` as none; a null failed without saying why.
        if not isinstance(data, dict) or not isinstance(data.get("result"), list):
            raise ParamError("the result must be an array, one value per item asked for")
        return configuration(data, cls)

    converter.register_structure_hook(types.ConfigurationResponse, configuration_answer)
    return converter


_converter = strict_converter()


@attrs.define
class StreamParams:
    """dllm/inlineCompletion: InlineCompletionParams plus the token progress is reported on."""

    text_document: types.TextDocumentIdentifier
    position: types.Position
    context: types.InlineCompletionContext = attrs.field(
        factory=lambda: types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))
    partial_result_token: int | str | None = None


@attrs.define
class NextEditsParams:
    text_document: types.TextDocumentIdentifier
    position: types.Position | None = None


@attrs.define
class FillOptions:
    marker: str | None = attrs.field(default=None)
    apply: bool = True
    # The document version the range was given for (the code action sets it): the fill is
    # refused when the document is at another one, where the range may cover other text.
    version: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.marker is not None and not self.marker.strip():
            raise ValueError("marker must be a non-empty string")


def as_plain(value: Any) -> Any:
    """pygls' namedtuples back into JSON values."""
    if hasattr(value, "_asdict"):
        return {k: as_plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [as_plain(v) for v in value]
    return value


def decode(raw: Any, cls: type[T], what: str) -> T:
    """`raw` (JSON or pygls' namedtuple) as a `cls`; InvalidParams saying what is wrong."""
    data = as_plain(raw)
    if not isinstance(data, dict):
        raise JsonRpcInvalidParams(f"{what} must be a JSON object")
    try:
        return strict_structure(data, cls)
    except Exception as exc:
        raise JsonRpcInvalidParams(f"invalid {what}: {describe(exc)}") from None


def strict_structure(data: Any, cls: type[T]) -> T:
    # lsprotocol's converter turns 5 into "5" and "yes" into True; our own params take JSON's types
    if attrs.has(cls) and cls.__module__ == __name__ and isinstance(data, dict):
        for field in attrs.fields(attrs.resolve_types(cls)):
            key = _camel(field.name)
            allowed = tuple(t for t in (typing.get_args(field.type) or (field.type,)) if t in (str, bool, int))
            value = data.get(key)
            if allowed and value is not None and (type(value) not in allowed):   # True is no int here
                names = {str: "a string", bool: "a boolean", int: "an integer"}
                raise TypeError(f"{key} must be {' or '.join(names[t] for t in allowed)}")
    return _converter.structure(data, cls)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _format(error: BaseException, cls: type | None) -> str:
    return str(error) if isinstance(error, ParamError) else format_exception(error, cls)


def describe(error: BaseException) -> str:
    try:
        return "; ".join(transform_error(error, path="$", format_exception=_format))
    except Exception:
        return str(error)


def fill_arguments(args: tuple, command: str) -> tuple[str, types.Range, FillOptions]:
    """dllm.fillHoles takes [uri, range, options?] with options {"marker": str, "apply": bool,
    "version": int}."""
    args = tuple(as_plain(a) for a in args)
    if len(args) not in (2, 3) or not isinstance(args[0], str):
        raise JsonRpcInvalidParams(f"{command} takes [uri, range, options?]")
    try:
        lsp_range = strict_structure(args[1], types.Range)
    except Exception:
        raise JsonRpcInvalidParams(f"{command}: the second argument must be an LSP Range") from None
    options = decode(args[2] if len(args) == 3 else {}, FillOptions, f"{command} options")
    return args[0], lsp_range, options


def companion_arguments(args: tuple, command: str) -> tuple[str, str]:
    """dllm.applyCompanionEdit takes [uri, import statement]."""
    if len(args) != 2 or not all(isinstance(a, str) for a in args):
        raise JsonRpcInvalidParams(f"{command} takes [uri, import statement]")
    return args[0], args[1]

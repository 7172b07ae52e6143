"""pygls' protocol, answering requests whose params fail to deserialise.

Stock pygls logs such a request and never answers it, so the client waits forever; here the
client gets InvalidParams naming the bad field."""
from __future__ import annotations

from typing import Any

from cattrs import transform_error
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.protocol import LanguageServerProtocol

_ANSWERED = object()   # a request already answered with an error while being read


class DllmProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" in data and "method" in data:
                problems = describe(exc.__cause__) if exc.__cause__ is not None else str(exc)
                error = JsonRpcInvalidParams(f"invalid params for {data['method']}: {problems}")
                self._send_response(data["id"], error=error.to_response_error())
                return _ANSWERED
            raise

    def handle_message(self, message) -> None:
        if message is _ANSWERED:
            return
        super().handle_message(message)


def describe(error: BaseException) -> str:
    try:
        return "; ".join(transform_error(error, path="$"))
    except Exception:
        return str(error)

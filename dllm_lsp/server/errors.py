"""Which failures the client hears about, and as what.

- PlanError (the planner cannot plan what the client asked) -> InvalidParams;
- ModelUnavailable (no model loaded) and CanvasTooSmall (the options ask for slots larger than the
  model's positions) -> RequestFailed: a valid request the server cannot serve now;
- anything else is a bug of ours and reaches pygls, which answers InternalError and logs it.
Protocol-level checks (an unknown document, a position outside it, malformed params) raise
InvalidParams where they are made (positions.py, params.py, documents.py).
"""
from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from dllm_lsp.engine.canvas import CanvasTooSmall
from dllm_lsp.planner.types import PlanError

from .model_host import ModelUnavailable

REQUEST_FAILED = -32803   # LSP 3.17 RequestFailed: the request was valid but could not be served

T = TypeVar("T")


class RequestFailed(JsonRpcException):
    CODE = REQUEST_FAILED


async def answered(work: Awaitable[T]) -> T:
    """Await `work`, turning the failures above into the LSP errors the client should see."""
    try:
        return await work
    except (ModelUnavailable, CanvasTooSmall) as exc:
        raise RequestFailed(str(exc)) from None
    except PlanError as exc:
        raise JsonRpcInvalidParams(str(exc)) from None

"""Which failures the client hears about, and as what.

- PlanError (the planner cannot plan what the client asked) -> InvalidParams;
- ModelUnavailable (no model loaded) and CanvasTooSmall (the options ask for slots larger than the
  model's positions) -> RequestFailed: a valid request the server cannot serve now;
- running out of memory (the GPU's, or the CPU allocator's) -> RequestFailed saying so and what
  needs less: the request could not be served now, the next one may be (the allocator has its
  memory back once the failed request's tensors are gone);
- anything else is a bug of ours and reaches pygls, which answers InternalError and logs it.
Protocol-level checks (an unknown document, a position outside it, malformed params) raise
InvalidParams where they are made (positions.py, params.py, documents.py).
"""
from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from dllm_lsp.cli_errors import one_line
from dllm_lsp.engine.canvas import CanvasTooSmall
from dllm_lsp.engine.engine import out_of_memory
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
    except (MemoryError, RuntimeError) as exc:     # torch.cuda.OutOfMemoryError is a RuntimeError
        if not out_of_memory(exc):
            raise
        raise RequestFailed(f"out of memory for this completion ({one_line(exc)}); a smaller contextTokens or "
                            "maxSpanTokens, fewer requests at once, or a smaller model needs less") from None


"""`dllm/inlineCompletion`: report each denoising state with $/progress on the client's
partialResultToken, throttled, then answer with the final InlineCompletionList."""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from lsprotocol import converters, types
from pygls.exceptions import JsonRpcInvalidParams

from dllm_lsp.engine.types import StepState
from dllm_lsp.planner.types import SpanPlan

from .positions import range_of

if TYPE_CHECKING:
    from .app import DllmLanguageServer

_converter = converters.get_converter()


def as_plain(value: Any) -> Any:
    """pygls hands custom-method params over as namedtuples; turn them back into JSON values."""
    if hasattr(value, "_asdict"):
        return {k: as_plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [as_plain(v) for v in value]
    return value


def params_from_object(raw: Any) -> tuple[types.InlineCompletionParams, int | str | None]:
    data = as_plain(raw)
    if not isinstance(data, dict):
        raise JsonRpcInvalidParams("dllm/inlineCompletion takes InlineCompletionParams")
    token = data.pop("partialResultToken", None)
    data.setdefault("context", {"triggerKind": types.InlineCompletionTriggerKind.Invoked.value})
    try:
        params = _converter.structure(data, types.InlineCompletionParams)
    except Exception as exc:
        raise JsonRpcInvalidParams(f"bad dllm/inlineCompletion params: {exc}") from None
    if token is not None and not isinstance(token, (int, str)):
        raise JsonRpcInvalidParams("partialResultToken must be a string or an integer")
    return params, token


class StreamReporter:
    def __init__(self, ls: "DllmLanguageServer", uri: str, token: int | str | None, interval_ms: int) -> None:
        self.ls = ls
        self.uri = uri
        self.token = token
        self.interval = interval_ms / 1000
        self.loop = asyncio.get_running_loop()   # reports are sent from the event loop thread
        self._last_sent = 0.0

    def on_step(self, plan: SpanPlan, state: StepState) -> None:
        """Called on the model thread after each step; hands the report to the event loop."""
        now = time.monotonic()
        if now - self._last_sent < self.interval and state.masked_left > 0:
            return
        self._last_sent = now
        value = {
            "kind": "report",
            "step": state.step,
            "totalSteps": state.total_steps,
            "text": state.slot_texts[0][0],
            "meanConfidence": round(state.mean_confidence, 4),
            "maskedLeft": state.masked_left,
            "start": plan.replace_start,
            "end": plan.replace_end,
        }
        self.loop.call_soon_threadsafe(self._send, value)

    def _send(self, value: dict) -> None:
        start, end = value.pop("start"), value.pop("end")
        try:
            document = self.ls.workspace.get_text_document(self.uri)
            value["range"] = _converter.unstructure(range_of(document, start, min(end, len(document.source))))
        except Exception:
            pass
        self.ls.progress(types.ProgressParams(token=self.token, value=value))

    def final(self, result: types.InlineCompletionList) -> None:
        text = result.items[0].insert_text if result.items else ""
        self.ls.progress(
            types.ProgressParams(token=self.token, value={"kind": "end", "text": text, "final": True})
        )

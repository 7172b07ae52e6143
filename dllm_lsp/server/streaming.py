"""`dllm/inlineCompletion`: report each denoising state with $/progress on the client's
partialResultToken, throttled, then answer with the final InlineCompletionList."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lsprotocol import converters, types
from pygls.workspace.position_codec import PositionCodec

from dllm_lsp.engine.types import StepState
from dllm_lsp.pipeline import CompletionPlan

from .positions import range_in_text

_converter = converters.get_converter()


class StreamReporter:
    """Turns the model thread's step states into $/progress reports sent from the event loop."""

    def __init__(self, send: Callable[[types.ProgressParams], None], codec: PositionCodec,
                 token: int | str, interval_ms: int) -> None:
        self.send = send
        self.codec = codec
        self.token = token
        self.interval = interval_ms / 1000
        self.loop = asyncio.get_running_loop()   # reports are sent from the event loop thread
        self._last_sent = 0.0
        # Once the request is answered (its result, or an error such as a cancel) no report may
        # follow (LSP): the step running when it was cancelled still calls on_step.
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def _send(self, params: types.ProgressParams) -> None:
        if not self.closed:
            self.send(params)

    def on_step(self, plan: CompletionPlan, state: StepState) -> None:
        """Called on the model thread after each step; hands the report to the event loop."""
        if self.closed:
            return
        now = time.monotonic()
        if now - self._last_sent < self.interval and state.masked_left > 0:
            return
        self._last_sent = now
        span = plan.span
        at = range_in_text(plan.snapshot.text, span.replace_start, span.replace_end, self.codec)
        value = {
            "kind": "report",
            "step": state.step,
            "totalSteps": state.total_steps,
            "text": state.slot_texts[0][0],
            "meanConfidence": round(state.mean_confidence, 4),
            "maskedLeft": state.masked_left,
            "range": _converter.unstructure(at),
        }
        self.loop.call_soon_threadsafe(self._send, types.ProgressParams(token=self.token, value=value))

    def final(self, result: types.InlineCompletionList) -> None:
        text = result.items[0].insert_text if result.items else ""
        self._send(types.ProgressParams(token=self.token, value={"kind": "end", "text": text, "final": True}))
        self.close()

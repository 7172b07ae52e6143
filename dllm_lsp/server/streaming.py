"""`dllm/inlineCompletion`: report each denoising state with $/progress on the client's
partialResultToken, throttled, then answer with the final InlineCompletionList.

A report is placed on the document as it is when it is sent (on the event loop, where edits are
applied), as the final answer is: the user types on while the model denoises, and a report
ranged on the version the request was made on showed the refinement a line above the cursor
after an Enter, or over what the user had typed since. One that no longer fits exactly
(rebase.py), or whose request was cancelled or superseded or its document closed, is not sent."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lsprotocol import converters, types
from pygls.workspace.position_codec import PositionCodec

from dllm_lsp.engine.types import StepState
from dllm_lsp.pipeline import CompletionPlan

from .completions import Placer
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

    def on_step(self, plan: CompletionPlan, state: StepState, place: Placer) -> None:
        """Called on the model thread after each step; hands the report to the event loop, where
        `place` puts it on the document as it is then (completions.CompletionService)."""
        if self.closed:
            return
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
        }
        span = plan.span
        self.loop.call_soon_threadsafe(self._report, value, span.replace_start, span.replace_end, place)

    def _report(self, value: dict, start: int, end: int, place: Placer) -> None:
        """On the event loop: the report ranged on the current version, or nothing."""
        if self.closed:
            return
        placed = place(value["text"], start, end)
        if placed is None:
            return
        text, start, end = placed
        at = range_in_text(text, start, end, self.codec)
        self._send(types.ProgressParams(token=self.token, value={**value, "range": _converter.unstructure(at)}))

    def final(self, result: types.InlineCompletionList) -> None:
        text = result.items[0].insert_text if result.items else ""
        self._send(types.ProgressParams(token=self.token, value={"kind": "end", "text": text, "final": True}))
        self.close()

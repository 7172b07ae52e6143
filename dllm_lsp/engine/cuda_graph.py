"""A model call captured once in a CUDA graph and replayed with new inputs.

Why: a denoising step of a small model on a GPU is bound by the host, not the device. The
32M-parameter embedded model's step cost about 6 ms on an H200 (docs/results/
latency-h200-dllm-embedded-30m.json: 36 ms for 6 steps), far above its arithmetic, because each
of its hundred-odd kernels is launched from Python one by one. Replaying a captured graph launches them
all at once. The shapes of a request's steady steps are fixed (the span's rows against a context
that no longer changes), so the graph is captured on its first such step and replayed on the
rest; a slot that grows opens a new session, and with it a new graph.

`GraphedCall(fn, inputs)` runs `fn(*inputs)` once on a side stream (a warm-up that is also the
first step's answer: lazy initialisation such as cuBLAS workspaces and Triton compiles happens
outside the capture), captures a second call into a graph, and from then on copies new inputs
into the static input buffers and replays. The output is a static buffer the next replay
overwrites: callers copy what they keep. On a device without CUDA there is nothing to capture
and the call runs eagerly on the static buffers (the same bookkeeping, so the CPU tests run it).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import torch

log = logging.getLogger("dllm_lsp.engine")


class GraphSwitch(Protocol):
    """A model's switch for replaying steady steps from CUDA graphs (`serve --cuda-graphs`): its
    sessions read it, and turn it off for good when a capture fails."""

    name: str
    cuda_graphs: bool


class GraphedCall:
    """`device`: where to capture when there are no inputs (else the inputs'); `warm_ups`: calls on
    the side stream before the capture (the last one's result is `first`)."""

    def __init__(self, fn: Callable[..., object], inputs: tuple[torch.Tensor, ...] = (),
                 device: torch.device | None = None, warm_ups: int = 1) -> None:
        self.fn = fn
        self.inputs = tuple(t.clone() for t in inputs)
        device = self.inputs[0].device if device is None else torch.device(device)
        self.graph: torch.cuda.CUDAGraph | None = None
        if device.type != "cuda":
            self.first = fn(*self.inputs)
            return
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(warm_ups):
                self.first = fn(*self.inputs)       # the warm-up: this step's answer
        current = torch.cuda.current_stream(device)
        current.wait_stream(side)
        if isinstance(self.first, torch.Tensor):
            self.first.record_stream(current)       # used on this stream from now on
        graph = torch.cuda.CUDAGraph()
        # thread_local: what other threads do meanwhile (a server's other requests) is not part of
        # this capture and does not fail it, unless it syncs with the capturing stream.
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self.output = fn(*self.inputs)
        self.graph = graph

    def __call__(self, *inputs: torch.Tensor) -> object:
        """fn(*inputs) replayed: a static buffer, overwritten by the next call."""
        for static, new in zip(self.inputs, inputs):
            static.copy_(new)
        if self.graph is None:
            return self.fn(*self.inputs)
        self.graph.replay()
        return self.output


def capture_or_none(owner: str, fn: Callable[..., object], inputs: tuple[torch.Tensor, ...]) -> GraphedCall | None:
    """`GraphedCall(fn, inputs)`, or None when the capture fails (a sync inside the step, say): a
    failed capture costs no completion. Why it failed is logged; the caller turns its model's
    graphs off and goes on eagerly, so this is said once per model."""
    try:
        return GraphedCall(fn, inputs)
    except Exception as exc:   # noqa: BLE001 - any capture error falls back to the eager step
        log.warning("capturing %s's step in a CUDA graph failed (%s: %s); running it eagerly from now on",
                    owner, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return None

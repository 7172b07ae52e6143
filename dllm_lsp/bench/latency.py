"""`dllm-lsp bench`: end-to-end completion latency of a model (engine only)."""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import replace

import torch

from dllm_lsp.engine.denoise import RUN_STATE_ENV
from dllm_lsp.engine.types import GROWING_SLOT_START, DecodeSettings, InfillRequest

from .environment import environment, percentiles, variable_set
from .overhead import synthetic_python
from .profiling import profile_calls

CASES = {
    "line_tail": (32, True),
    "block_body": (64, False),
}


RETURN_LINE = "        return total"


def return_tail(text: str, start: int) -> tuple[str, str, int]:
    """(prefix, suffix, cut): the first `return total` line of the generated module from
    `start` on, cut after `return ` (the span to fill is the rest of that line)."""
    cut = text.index(RETURN_LINE, start)
    return text[:cut] + "        return ", text[cut + len(RETURN_LINE):], cut


ALTERNATIVES = 4      # the line tail once more with this many suggestions (the `alternatives` option)
GRAPHED = "_cuda_graphs"   # the case with its steady steps replayed from CUDA graphs (engine/cuda_graph.py)
DEVICE_STATE = "_device_state"   # the case with the run's state on the model's device (denoise.state_device)


def run_latency_bench(engine, runs: int = 20, steps: int = DecodeSettings().steps, profile: bool = False,
                      cuda_graphs: bool | None = None, device_state: bool | None = None,
                      also_steps: tuple[int, ...] = ()) -> dict:
    """Each case twice, runs interleaved so both see the same machine: with a growing slot
    (starting at GROWING_SLOT_START tokens, the server's default) and with the slot at full width
    from the first step (`<case>_full_width`, `slotStartTokens: 0`): the pair that moved the GPU's
    default to growing slots too (docs/serving.md#slots-that-grow). The line
    tail also with ALTERNATIVES suggestions (`line_tail_alternatives_4`: the greedy one and
    sampled others in one batch, growing slot): what the `alternatives` option costs.
    `cuda_graphs` (None: on CUDA, where the model can): each case also with its steady steps
    replayed from CUDA graphs (`<case>_cuda_graphs`, growing slot; `p50_vs_eager`), interleaved
    with the others. `device_state` (None: where the model is not on the host): each case also
    with the run's state on the model's device (`<case>_device_state`, and with the graphs
    `<case>_cuda_graphs_device_state`; `p50_vs_host_state`): what keeping it on the host
    (denoise.state_device) buys. `also_steps`: each case also with that step budget
    (`<case>_steps_N`, growing slot; `p50_vs_steps`: against the `steps` case). `profile`: where the line tail's time goes
    (`profiling.profile_calls`: host or device, launches, syncs, the project's Python
    functions), for each of those layouts: the figures that say what a GPU completion is bound by."""
    denoiser = engine.denoiser
    graphs_wanted = denoiser.device.type == "cuda" if cuda_graphs is None else cuda_graphs
    can_graph = graphs_wanted and hasattr(denoiser, "cuda_graphs")
    graphs_before = getattr(denoiser, "cuda_graphs", False)
    states = denoiser.device.type != "cpu" if device_state is None else device_state
    # The layouts of the steps (eager, replayed) and where the run's state is kept.
    layouts_of_steps = [""] + ([GRAPHED] if can_graph else [])
    layouts_of_steps += [step + DEVICE_STATE for step in layouts_of_steps] if states else []

    @contextmanager
    def laid_out(suffix_: str):
        """A case's layout for a while: the model's CUDA graphs on or off (where this run measures
        them) and the run's state on the host or the device, as its name's suffix says."""
        with variable_set(RUN_STATE_ENV, "device" if DEVICE_STATE in suffix_ else None):
            if not can_graph:
                yield
                return
            denoiser.cuda_graphs = GRAPHED in suffix_
            try:
                yield
            finally:
                denoiser.cuda_graphs = graphs_before

    text = synthetic_python(400)
    prefix, suffix, _ = return_tail(text, len(text) // 2)
    growing = DecodeSettings(steps=steps, slot_start_tokens=GROWING_SLOT_START)
    layouts = {"": growing, "_full_width": replace(growing, slot_start_tokens=0)}
    several = f"_alternatives_{ALTERNATIVES}"
    cases = {}
    for name, (tokens, single_line) in CASES.items():
        request = InfillRequest.single(prefix, suffix, tokens, single_line)
        variants = dict(layouts)
        if name == "line_tail":
            variants[several] = replace(growing, n=ALTERNATIVES, temperature=0.8, greedy_first=True)
        variants.update({steps_: growing for steps_ in layouts_of_steps if steps_})
        variants.update({f"_steps_{n}": replace(growing, steps=n) for n in also_steps})
        samples: dict[str, list[float]] = {suffix_: [] for suffix_ in variants}
        passes: dict[str, list[int]] = {suffix_: [] for suffix_ in variants}   # sampled runs' steps vary
        last = {}

        def infill(suffix_: str, settings: DecodeSettings):
            with laid_out(suffix_):
                return engine.infill(request, settings)

        for suffix_, settings in variants.items():   # warm-up (allocations, prefix cache)
            infill(suffix_, settings)
        for run in range(runs):
            for suffix_, settings in variants.items():
                result = infill(suffix_, replace(settings, seed=run))
                samples[suffix_].append(result.latency_ms)
                passes[suffix_].append(result.steps)
                last[suffix_] = result
        for suffix_, result in last.items():
            cases[name + suffix_] = {
                **percentiles(samples[suffix_]), "span_tokens": tokens, "steps": result.steps,
                "mean_steps": round(sum(passes[suffix_]) / len(passes[suffix_]), 2),
                "tokens_committed": result.tokens_committed, "slot_width_decoded": result.slot_widths[0],
                "completion": result.text,
            }
        cases[name]["p50_vs_full_width"] = round(cases[name]["p50_ms"] / cases[name + "_full_width"]["p50_ms"], 3)
        for n in also_steps:
            cases[f"{name}_steps_{n}"]["p50_vs_steps"] = round(cases[f"{name}_steps_{n}"]["p50_ms"] / cases[name]["p50_ms"], 3)
        if several in variants:
            cases[name + several]["p50_vs_one"] = round(cases[name + several]["p50_ms"] / cases[name]["p50_ms"], 3)
        if GRAPHED in variants:
            graphed = cases[name + GRAPHED]
            graphed["p50_vs_eager"] = round(graphed["p50_ms"] / cases[name]["p50_ms"], 3)
            graphed["same_completion"] = graphed["completion"] == cases[name]["completion"]
        for suffix_ in ("", GRAPHED):
            if suffix_ + DEVICE_STATE in variants:
                on_device, on_host = cases[name + suffix_ + DEVICE_STATE], cases[name + suffix_]
                on_device["p50_vs_host_state"] = round(on_device["p50_ms"] / on_host["p50_ms"], 3)
                on_device["same_completion"] = on_device["completion"] == on_host["completion"]
    figures = {
        "benchmark": "completion latency (engine, warm prefix cache)",
        "model": engine.denoiser.describe(),
        "settings": {"steps": steps, "also_steps": list(also_steps), "runs": runs, "context_tokens": engine.context_tokens,
                     "cuda_graphs_variant": can_graph, "cuda_graphs_default": graphs_before,
                     "device_state_variant": states, "run_state": os.environ.get(RUN_STATE_ENV, "host"),
                     "slot_start_tokens": GROWING_SLOT_START,
                     "default_slot_start": engine.start_tokens(DecodeSettings()),
                     "torch_threads": torch.get_num_threads()},
        "environment": environment(str(engine.denoiser.device)),
        "cases": cases,
    }
    if profile:
        line_tail = InfillRequest.single(prefix, suffix, *CASES["line_tail"])
        figures["profile"] = {}
        for suffix_ in layouts_of_steps:
            with laid_out(suffix_):
                figures["profile"]["line_tail" + suffix_] = {
                    "steps": cases["line_tail" + suffix_]["steps"],
                    **profile_calls(lambda: engine.infill(line_tail, growing), denoiser.device)}
    return figures

"""`dllm-lsp bench`: end-to-end completion latency of a model (engine only)."""
from __future__ import annotations

import torch

from dllm_lsp.engine.types import DecodeSettings, InfillRequest

from .environment import environment, percentiles
from .overhead import synthetic_python

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


def run_latency_bench(engine, runs: int = 20, steps: int = 8) -> dict:
    text = synthetic_python(400)
    prefix, suffix, _ = return_tail(text, len(text) // 2)
    cases = {}
    for name, (tokens, single_line) in CASES.items():
        request = InfillRequest.single(prefix, suffix, tokens, single_line)
        engine.infill(request, DecodeSettings(steps=steps))   # warm-up (allocations, prefix cache)
        samples = []
        for run in range(runs):
            result = engine.infill(request, DecodeSettings(steps=steps, seed=run))
            samples.append(result.latency_ms)
        cases[name] = {**percentiles(samples), "span_tokens": tokens, "steps": result.steps,
                       "tokens_committed": result.tokens_committed}
    return {
        "benchmark": "completion latency (engine, warm prefix cache)",
        "model": engine.denoiser.describe(),
        "settings": {"steps": steps, "runs": runs, "context_tokens": engine.context_tokens,
                     "torch_threads": torch.get_num_threads()},
        "environment": environment(str(engine.denoiser.device)),
        "cases": cases,
    }

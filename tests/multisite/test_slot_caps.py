"""Multi-site slots are no wider than the model was trained on (Denoiser.max_slot), as the
completions' are (Options.span_tokens): holes and call sites are sized by maxSpanTokens /
maxLineTokens before the model is known, and the joint request reached the engine at those
widths. A tiny model whose training slot is 4 tokens, in-process."""
from __future__ import annotations

import json

from dllm_lsp.arch.tiny import write_tiny_model
from dllm_lsp.multisite.holes import find_holes
from dllm_lsp.multisite.service import MultisiteService
from dllm_lsp.options import Options
from dllm_lsp.server.model_host import ModelHost
from dllm_lsp.syntax.snapshot import Snapshot

SOURCE = "def first(values):\n    # TODO\n\n\ndef second(x):\n    # TODO\n"


def narrow_model(folder, max_slot: int):
    folder = write_tiny_model(folder)
    config = json.loads((folder / "config.json").read_text())
    config["training"] = {**config.get("training", {}), "max_slot": max_slot}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


async def test_filled_holes_are_capped_at_the_models_trained_slot(tmp_path):
    folder = narrow_model(tmp_path / "narrow", 4)
    source = Snapshot.parse(SOURCE, "python")
    options = Options()
    holes = find_holes(source, 0, len(SOURCE), "TODO", options.planner.max_span_tokens,
                       options.planner.max_line_tokens).holes
    assert len(holes) == 2 and min(h.max_tokens for h in holes) > 4   # as planned: the options' sizes
    host = ModelHost()
    view = host.view()
    try:
        await view.load(str(folder), "cpu")
        widths = []
        real_infill = view.infill

        async def recording(request, settings, *args, **kwargs):
            result = await real_infill(request, settings, *args, **kwargs)
            widths.append(([slot.max_tokens for slot in request.slots], result.slot_widths))
            return result

        view.infill = recording
        outcomes = await MultisiteService(view).fill_sites(source, holes, options)
        assert len(outcomes) == 2
        (asked, decoded), = widths
        assert asked == [4, 4] and max(decoded) <= 4
    finally:
        host.shutdown()

"""The multi-site service with a real (tiny) model in-process."""
from __future__ import annotations

from dllm_lsp.multisite.next_edits import plan_next_edits
from dllm_lsp.multisite.service import MultisiteService
from dllm_lsp.options import Options
from dllm_lsp.server.model_host import ModelHost
from dllm_lsp.syntax.snapshot import Snapshot


async def test_a_joint_fill_decodes_one_candidate_whatever_alternatives_says(tiny_model_dir):
    """`alternatives: 8` made every nextEdits / fillHoles run decode 8 candidates and keep the
    first: the same edits at 10x the time."""
    before = "def add(a, b):\n    return a + b\n\n\nx = add(1, 2)\ny = add(3, 4)\n"
    after = before.replace("def add(a, b)", "def add(a, b, c)")
    plan = plan_next_edits([before], after, "python")
    host = ModelHost()
    view = host.view()
    try:
        await view.load(str(tiny_model_dir), "cpu")
        asked = []
        real_infill = view.infill

        async def recording(request, settings, *args, **kwargs):
            asked.append(settings.n)
            return await real_infill(request, settings, *args, **kwargs)

        view.infill = recording
        options = Options().merged({"alternatives": 8})
        assert options.decode.alternatives == 8
        outcomes = await MultisiteService(view).fill_sites(Snapshot.parse(after, "python"), plan.sites, options)
        assert asked == [1] and len(outcomes) == len(plan.sites) == 2
    finally:
        host.shutdown()

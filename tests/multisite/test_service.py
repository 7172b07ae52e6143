"""The multi-site service with a real (tiny) model in-process."""
from __future__ import annotations

from dllm_lsp.engine.engine import Engine
from dllm_lsp.loader import load_model
from dllm_lsp.multisite.holes import find_holes
from dllm_lsp.multisite.next_edits import plan_next_edits
from dllm_lsp.multisite.service import (
    CHARS_PER_TOKEN_PROBE,
    MultisiteService,
    count_tokens,
    fit_to_budget,
    outer_pieces_cut,
)
from dllm_lsp.multisite.sites import joint_request
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


BIG = "def first():\n    pass\n\n\n" + "".join(f"def f{i}(x):\n    return x * {i}\n\n\n" for i in range(40000)) \
    + "def last():\n    pass\n"


def test_fitting_sites_tokenizes_only_what_could_fit(tiny_model_dir):
    """The whole 1.3 M characters between a file's first and last hole were tokenized (2.4 s, on the
    event loop) to learn that the last hole does not fit; a prefix as long as the room could
    hold already shows it."""
    engine = Engine(load_model(str(tiny_model_dir), "cpu"))
    denoiser = engine.denoiser
    source = Snapshot.parse(BIG, "python")
    holes = find_holes(source, 0, len(BIG)).holes
    assert len(holes) == 2 and len(BIG) > 1_000_000
    encoded = []
    real_encode = denoiser.encode

    def recording(text):
        encoded.append(len(text))
        return real_encode(text)

    denoiser.encode = recording
    try:
        assert fit_to_budget(engine, BIG, holes, 1024) == holes[:1]
        assert max(encoded) <= 1024 * CHARS_PER_TOKEN_PROBE
        # a text that fits is counted exactly, whatever its length
        for text in ["", "x = 1\n", BIG[:5000], " " * 3000 + "y"]:
            assert count_tokens(denoiser, text, 10_000) == len(real_encode(text))
            assert count_tokens(denoiser, text, 3) == len(real_encode(text)) or len(real_encode(text)) > 3
    finally:
        denoiser.encode = real_encode


def test_the_text_around_the_sites_reaches_the_engine_cut_to_the_budget(tiny_model_dir):
    """The engine tokenizes each piece whole (holding the GIL) before it keeps the budget's share:
    the text before the first site and after the last one is cut first, at line starts, keeping
    more tokens than the budget."""
    denoiser = Engine(load_model(str(tiny_model_dir), "cpu")).denoiser
    holes = find_holes(Snapshot.parse(BIG, "python"), 0, len(BIG)).holes
    request = joint_request(BIG, holes[:1])
    cut = outer_pieces_cut(request, 256)
    assert cut.pieces[0] == request.pieces[0]                  # short: untouched
    suffix = cut.pieces[-1]
    assert request.pieces[-1].startswith(suffix) and suffix.endswith("\n")
    assert len(suffix) <= 256 * CHARS_PER_TOKEN_PROBE and len(denoiser.encode(suffix)) > 256
    assert cut.slots == request.slots
    tail = joint_request(BIG, holes[1:])
    prefix = outer_pieces_cut(tail, 256).pieces[0]
    assert tail.pieces[0].endswith(prefix) and tail.pieces[0][-len(prefix) - 1] == "\n"   # from a line start
    assert len(prefix) <= 256 * CHARS_PER_TOKEN_PROBE and len(denoiser.encode(prefix)) > 256
    small = joint_request("def f():\n    pass\n", find_holes(Snapshot.parse("def f():\n    pass\n", "python"), 0, 0).holes)
    assert outer_pieces_cut(small, 256) is small

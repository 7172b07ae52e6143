"""The GPU job's engine comparison (gpujob/check.py `check_engine`), run here on the CPU with real
`dllm-lsp infill` processes: every decode loop is in it (fixed-length, variable-length DreamOn,
block-wise), each with its state on the host against on the device, the rows land as they
complete, and a request answered with an error fails its row instead of passing as a difference."""
from __future__ import annotations

import json
import os

import pytest
import torch

from dllm_lsp.checkpoints.block_tiny import BLOCK_LAYOUTS
from dllm_lsp.checkpoints.tiny import FAMILY_OF
from dllm_lsp.gpujob.check import CHECK_BLOCK_LAYOUTS, CHECK_LAYOUTS, check_engine, infill_texts, main


def test_every_decode_loop_is_compared_with_its_state_on_the_host_and_on_the_device():
    landed: list[int] = []
    rows = check_engine(torch.device("cpu"), ["dreamon", "sdar"], dict(os.environ),
                        lambda so_far: landed.append(len(so_far)))
    assert landed == list(range(1, len(rows) + 1))          # each row as it completed
    by_model = {row["model"]: row for row in rows}
    assert all(row["ok"] for row in rows), [(r["model"], r.get("error")) for r in rows]
    pairs = [row for row in rows if row.get("run_state_pair")]
    # The embedded model, the first checkpoint (DreamOn here) and the block-wise loop (SDAR).
    assert len(pairs) == 3 and any(r["model"].startswith("sdar") for r in pairs), list(by_model)
    assert any(r["model"].startswith("dreamon") for r in pairs)
    for row in pairs:
        # On one device the two layouts must give the same text (on a GPU too: the same arithmetic).
        assert row["agree"] == "3/3" and not row["host_failed"] and not row["device_failed"], row
    assert by_model["sdar (tiny random)"]["agree"] == "3/3"     # here "cpu" and the device are one run


def test_a_request_answered_with_an_error_fails_the_run(tmp_path, tiny_model_dir):
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"id": "bad", "prefix": "x = ", "suffix": "", "max_tokens": 0}) + "\n")
    with pytest.raises(RuntimeError, match="request 'bad' failed: max_tokens must be"):
        infill_texts(str(tiny_model_dir), "cpu", requests, dict(os.environ))


def test_the_check_takes_block_layouts_and_refuses_unknown_ones(tmp_path, capsys):
    assert set(CHECK_BLOCK_LAYOUTS) <= set(BLOCK_LAYOUTS) and set(CHECK_BLOCK_LAYOUTS) <= set(CHECK_LAYOUTS)
    # Every masked-diffusion family is run (a layout left out loads as a family that is in).
    assert {FAMILY_OF[layout].key for layout in FAMILY_OF} == {FAMILY_OF[layout].key for layout in CHECK_LAYOUTS
                                                               if layout in FAMILY_OF}
    with pytest.raises(SystemExit):
        main(["--device", "cpu", "--out", str(tmp_path / "c.json"), "--families", "dream,sdra"])
    assert "unknown layout(s) sdra" in capsys.readouterr().err

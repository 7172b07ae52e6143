"""Tiny checkpoint folders in every family's real layout, written once per test session."""
from pathlib import Path

import pytest

from dllm_lsp.checkpoints.tiny import LAYOUTS, write_tiny_checkpoint


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {layout: write_tiny_checkpoint(root / layout, layout, seed=i) for i, layout in enumerate(LAYOUTS)}


# The block families whose attention is bidirectional: they run in the same CheckpointSession as
# the LAYOUTS above (block_loader.py), so the session's shared step and "reuse" cache must work on
# their model too.
BIDIRECTIONAL_BLOCK_LAYOUTS = ("llada-moe", "coda")


@pytest.fixture(scope="session")
def loaded_bidirectional_blocks(tmp_path_factory):
    from dllm_lsp.checkpoints.block_tiny import write_tiny_block_checkpoint
    from dllm_lsp.loader import load_model

    root = tmp_path_factory.mktemp("bidirectional-blocks")
    return {layout: load_model(str(write_tiny_block_checkpoint(root / layout, layout)), "cpu")
            for layout in BIDIRECTIONAL_BLOCK_LAYOUTS}


@pytest.fixture(scope="session")
def loaded(tiny_checkpoints):
    """Each tiny folder loaded on the CPU once (tests that change cache settings restore them)."""
    from dllm_lsp.loader import load_model

    return {layout: load_model(str(folder), "cpu") for layout, folder in tiny_checkpoints.items()}


@pytest.fixture
def fresh_copy(tiny_checkpoints, tmp_path):
    """A private copy of a tiny folder that a test may damage."""
    import shutil

    def copy(layout: str) -> Path:
        target = tmp_path / layout
        shutil.copytree(tiny_checkpoints[layout], target)
        return target

    return copy

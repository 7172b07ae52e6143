"""`bench/profiling.py`: where a call's time goes, and a profile that fails costs nothing else."""
import torch

from dllm_lsp.arch.layers import Rotary
from dllm_lsp.bench.profiling import profile_calls


def test_a_profile_counts_ops_and_names_the_projects_own_functions():
    rotary = Rotary(64, 1e4)
    found = profile_calls(lambda: rotary.cos_sin(torch.arange(32), torch.float32), torch.device("cpu"), repeats=2)
    assert found["repeats"] == 2 and found["wall_ms_per_call"] > 0
    assert found["ops_per_call"] >= 4            # to, mul, cat, cos, sin, ... per call
    assert any(row["function"].startswith("dllm_lsp/arch/layers.py") for row in found["python_top"])


def test_a_profile_that_fails_is_an_error_not_a_crash():
    def broken():
        raise RuntimeError("CUPTI is not available")

    assert profile_calls(broken, torch.device("cpu")) == {"error": "RuntimeError: CUPTI is not available"}

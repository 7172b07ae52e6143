"""The GPU benchmarks' models are refused, in one line, on a CPU without the memory for them (a
7B model in float32 had been built until the kernel's out-of-memory killer ended it)."""
import subprocess
import sys

import pytest
import torch

from dllm_lsp.bench.memory import available_bytes, weights_too_big


def model() -> torch.nn.Module:
    return torch.nn.Linear(1024, 1024)          # 1.05M parameters: 4 MiB in float32


def test_a_model_larger_than_the_free_memory_is_refused_and_one_that_fits_is_not():
    cpu = torch.device("cpu")
    assert "need 0.0 GiB in float32" in weights_too_big(model, torch.float32, cpu, free=1 << 20)
    assert weights_too_big(model, torch.float32, cpu, free=1 << 30) is None
    assert weights_too_big(model, torch.float32, torch.device("cuda"), free=1) is None   # torch says so on a GPU


def test_available_memory_is_read_where_the_kernel_says_it(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:    2048 kB\n")
    assert available_bytes(meminfo) == 2048 * 1024
    assert available_bytes(tmp_path / "missing") is None


def test_bench_checkpoint_on_a_cpu_without_quick_is_refused_before_building():
    if (available_bytes() or 0) > 40 << 30:
        pytest.skip("this machine holds a 7B float32 model: nothing to refuse")
    proc = subprocess.run([sys.executable, "-m", "dllm_lsp", "bench", "checkpoint", "--device", "cpu"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "cannot be built here" in proc.stderr and "--quick" in proc.stderr

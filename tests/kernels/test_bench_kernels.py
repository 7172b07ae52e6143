"""`dllm-lsp bench kernels --device cpu --quick`: the smoke configuration runs the same code
path as the GPU benchmark (Triton in the interpreter) and writes the same JSON layout."""
import json

from dllm_lsp.bench.kernels import check_targets, default_bandwidth, main
from dllm_lsp.cli import main as cli_main


def test_quick_cpu_run_writes_the_report(tmp_path, capsys):
    out = tmp_path / "kernels.json"
    assert cli_main(["bench", "kernels", "--device", "cpu", "--quick", "--json", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == report
    assert report["device"]["device"] == "cpu" and report["device"]["torch"]
    assert report["settings"]["quick"] and report["settings"]["triton_interpreter"]
    kernels = {row["kernel"] for row in report["kernels"]}
    assert kernels == {"span_attention", "unmask_select", "add_rms_norm", "rope"}
    for row in report["kernels"]:
        assert row["torch_ms"] > 0 and row["kernel_ms"] > 0, row
        # The interpreted kernel computed the same thing as the torch path.
        assert row["max_abs_err"] < 1e-4, row
    for row in (r for r in report["kernels"] if r["kernel"] == "span_attention"):
        # Its one-launch form too (no CUDA graphs on the CPU: those figures are the GPU's).
        assert row["one_launch_ms"] > 0 and row["one_launch_max_abs_err"] < 1e-4 and "graph_ms" not in row
    step = report["step"]
    assert {(v["kernels"], v["execution"]) for v in step["variants"]} == {(False, "eager"), (True, "eager")}
    assert step["weight_bytes"] > 0 and step["weight_read_bound_ms"] is None   # no bandwidth on CPU
    assert step["greedy_tokens_agree"] == 1.0
    ar = step["autoregressive_token"]
    assert ar["median_ms_per_token"] > 0 and ar["denoising_step_over_ar_token"] > 0


def test_bandwidth_by_gpu_name():
    assert default_bandwidth("NVIDIA H100 80GB HBM3") == 3.35e12
    assert default_bandwidth("NVIDIA H200") == 4.8e12
    assert default_bandwidth("NVIDIA H100 PCIe") == 2.0e12
    assert default_bandwidth("Some Laptop GPU") is None and default_bandwidth(None) is None


def test_targets_are_judged_from_the_figures():
    report = {
        "settings": {"quick": False},
        "kernels": [
            {"kernel": "span_attention", "shape": {"heads": "dream-7b", "L": 32, "N": 2048},
             "speedup": 2.0, "torch_ms": 0.02, "kernel_ms": 0.01, "sdpa_precat_ms": 0.015},
            {"kernel": "unmask_select", "shape": {"rows": 32, "vocab": 152064, "dtype": "float32"}, "speedup": 2.5},
        ],
        "step": {"weight_read_bound_ms": 4.0, "variants": [
            {"kernels": True, "execution": "eager", "median_ms": 7.0, "x_weight_read_bound": 1.75},
            {"kernels": True, "execution": "cuda_graph", "median_ms": 5.0, "x_weight_read_bound": 1.25},
            {"kernels": False, "execution": "cuda_graph", "median_ms": 4.9, "x_weight_read_bound": 1.22},
        ]},
    }
    judged = {t["target"].split()[0]: t for t in check_targets(report)}
    assert judged["span"]["met"] and judged["span"]["vs_sdpa_precat"] == 1.5
    # A variant that failed (the capture of a step with a device sync, on the H200) has no time:
    # the target is judged from the variants that ran; a step that failed judges nothing.
    report["step"]["variants"].insert(0, {"kernels": True, "execution": "cuda_graph", "error": "AcceleratorError: x"})
    assert {t["target"].split()[0]: t for t in check_targets(report)}["Dream-7B-shaped"]["value"] == 1.25
    report["step"] = {"error": "OutOfMemoryError: y"}
    assert "Dream-7B-shaped" not in {t["target"].split()[0] for t in check_targets(report)}
    assert not judged["unmask-select"]["met"]
    assert judged["Dream-7B-shaped"]["met"] and judged["Dream-7B-shaped"]["variant"] == "cuda_graph"


def test_span_attention_is_judged_eager_and_graphed_from_its_faster_form():
    row = {"kernel": "span_attention", "shape": {"heads": "dream-7b", "L": 32, "N": 2048},
           "torch_ms": 0.03, "kernel_ms": 0.06, "speedup": 0.5, "sdpa_precat_ms": 0.02, "one_launch_ms": 0.024,
           "graph_ms": {"kernel": 0.004, "torch": 0.012, "sdpa_precat": 0.008, "one_launch": 0.01},
           "graph_speedup": {"kernel": 3.0, "sdpa_precat": 1.5, "one_launch": 1.2}}
    eager, graph = check_targets({"settings": {"quick": True}, "kernels": [row]})
    assert eager["variant"] == "one_launch" and eager["value"] == 1.25 and not eager["met"]
    assert "CUDA graph" in graph["target"] and graph["variant"] == "split_merge" and graph["value"] == 3.0
    assert graph["met"] and graph["vs_sdpa_precat"] == 2.0
    # Without the one-launch figure and the graphs (a CPU run): the split kernel, eager, alone.
    bare = {k: v for k, v in row.items() if k not in ("one_launch_ms", "graph_ms", "graph_speedup")}
    (only,) = check_targets({"settings": {"quick": True}, "kernels": [bare]})
    assert only["variant"] == "split_merge" and only["value"] == 0.5


def test_bad_device_is_a_clear_error():
    import pytest

    with pytest.raises(SystemExit, match="unsupported device"):
        main(["--device", "mps", "--quick", "--skip-step"])

"""A checkpoint loaded on the CPU owns its weights: saving a newer one over its files in place (a
training script's save into the folder a server serves) must not pull them from under it.

Float32 weights loaded on the CPU as float32 had stayed views of the file's memory map
(`Tensor.to` of the same dtype is no copy): the file cut and rewritten, the next forward pass
touched pages past its end and the process died of SIGBUS. Run in a child process, which is what
dies (a real load, a real tiny checkpoint)."""
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import sys
    from pathlib import Path

    from dllm_lsp.arch.tiny import write_tiny_model
    from dllm_lsp.checkpoints.tiny import write_tiny_checkpoint
    from dllm_lsp.engine.engine import Engine
    from dllm_lsp.engine.types import DecodeSettings, InfillRequest
    from dllm_lsp.loader import load_model

    folder = (write_tiny_model(Path(sys.argv[1])) if sys.argv[2] == "embedded" else
              write_tiny_checkpoint(Path(sys.argv[1]), sys.argv[2], shards=int(sys.argv[3])))
    denoiser = load_model(str(folder), "cpu")
    for shard in folder.glob("*.safetensors"):
        data = shard.read_bytes()
        shard.write_bytes(data[: len(data) // 2])     # the same file, cut short: a save under way
    result = Engine(denoiser, batching=False).infill(InfillRequest.single("def f(x):\\n    return ", "\\n", 4),
                                                     DecodeSettings(steps=2))
    print("answered", len(result.candidates))
""")


def run_child(tmp_path, layout: str, shards: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / layout), layout, str(shards)],
                          capture_output=True, text=True, timeout=300)


def test_weights_rewritten_in_place_under_a_loaded_checkpoint_do_not_kill_it(tmp_path):
    done = run_child(tmp_path, "open-dcoder", 1)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])   # -7: SIGBUS
    assert "answered 1" in done.stdout, done.stdout


def test_sharded_weights_too(tmp_path):
    done = run_child(tmp_path, "llada", 2)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "answered 1" in done.stdout, done.stdout


def test_the_embedded_model_too(tmp_path):
    # Its own loader (arch/weight_storage.py): float32 weights stayed the file's memory map as well.
    done = run_child(tmp_path, "embedded", 1)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "answered 1" in done.stdout, done.stdout

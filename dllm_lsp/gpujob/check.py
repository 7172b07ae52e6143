"""The job's first phase: CUDA correctness.

1. Every Triton kernel against its torch reference on the device (not the interpreter), at the
   test shapes and at the embedded (`gpu-30m`) and Dream-7B shapes. A kernel that raises or
   disagrees is reported with its error and listed in `failed_kernels`; the job disables it for
   every later phase (DLLM_LSP_DISABLE_KERNELS) and goes on with the reference.
2. The engine path: the same infill requests through `dllm-lsp infill` on the device and on
   the CPU, for the shipped embedded model and a tiny random checkpoint of every family (the
   masked-diffusion ones, and block diffusion with and without sub-blocks: `CHECK_BLOCK_LAYOUTS`),
   compared text for text; and the shipped model on the device with all of them in flight at
   once (shared steps, `--concurrency`) against one at a time; CUDA-graph steps against eager
   ones; each decode loop's state on the host against on the device. A request answered with an
   error fails its row (it is not a disagreement), and the rows are written as they complete.

    python -m dllm_lsp.gpujob.check --device cuda --out check.json [--quick] [--drill-fail KERNEL]

On a CPU (the job's dry run) the kernels run in Triton's interpreter at the test shapes only.
`--drill-fail` makes one kernel's Triton entry raise, to rehearse the failure path.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from dllm_lsp.bench.environment import environment
from dllm_lsp.checkpoints.block_tiny import BLOCK_LAYOUTS, write_tiny_block_checkpoint
from dllm_lsp.checkpoints.tiny import LAYOUTS, write_tiny_checkpoint
from dllm_lsp.cpus import usable_cpus
from dllm_lsp.engine.denoise import RUN_STATE_ENV
from dllm_lsp.kernels import dispatch, rmsnorm, rope, span_attention, unmask_select
from dllm_lsp.loader import default_model_path

# (n_heads, n_kv_heads, head_dim) of the shapes the kernels must be right at.
HEADS = {"test": (4, 2, 16), "test-odd": (6, 3, 24), "embedded": (8, 4, 64), "dream-7b": (28, 4, 128)}
DIMS = {"test": 48, "test-odd": 72, "embedded": 512, "dream-7b": 3584}
VOCABS = {"test": 1000, "test-odd": 777, "embedded": 16384, "dream-7b": 152064}
QUICK = ("test", "test-odd")
# The tiny checkpoints the check runs: one per model family (DiffuCoder's folders load as the Dream
# family: its tiny layout differs in names only, which the CPU tests cover), and the block-diffusion
# loop (engine/blockwise.py) through a dense block model and through one that decodes its blocks in
# sub-blocks (Fast-dLLM v2); the other block layouts differ from these in their weights' layout only.
# Each is two more processes in the check's box.
CHECK_BLOCK_LAYOUTS = ("sdar", "fast-dllm-v2")
CHECK_LAYOUTS = (*(layout for layout in LAYOUTS if layout != "diffucoder"), *CHECK_BLOCK_LAYOUTS)
REQUESTS = [
    {"id": "tail", "prefix": "def area(width, height):\n    return ", "suffix": "\n", "max_tokens": 12},
    {"id": "body", "prefix": "class Stack:\n    def push(self, item):\n", "suffix": "\n    def pop(self):\n        pass\n",
     "max_tokens": 16},
    {"id": "args", "prefix": "import os\nprint(os.path.join(", "suffix": "))\n", "max_tokens": 8},
]


def close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> tuple[bool, float]:
    """Within the tolerance of `dtype` arithmetic (fp32 references, low-precision kernels)."""
    if not got.dtype.is_floating_point:
        return bool(torch.equal(got.cpu(), want.cpu())), float((got != want).sum())
    err = float((got.float() - want.float()).abs().max()) if got.numel() else 0.0
    tol = {torch.float32: 2e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]
    scale = float(want.float().abs().max()) if want.numel() else 1.0
    return err <= tol * max(1.0, scale), err


def case(name: str, kernel: str, shape: dict, run: Callable[[], tuple[bool, float]]) -> dict:
    row = {"kernel": kernel, "case": name, "shape": shape}
    started = time.perf_counter()
    try:
        ok, err = run()
        row.update(ok=ok, max_abs_err=err)
        if not ok:
            row["error"] = f"output differs from the torch reference (max abs error {err:.3g})"
    except Exception as exc:   # compile errors, launch failures, wrong shapes: reported, not fatal
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}".splitlines()[0],
                   traceback=traceback.format_exc(limit=4))
    row["seconds"] = round(time.perf_counter() - started, 3)
    return row


def span_attention_rows(device, shapes, dtype) -> list[dict]:
    rows = []
    for name in shapes:
        h, hkv, d = HEADS[name]
        for l, n in ((5, 37), (32, 2048)) if name not in QUICK else ((3, 11), (7, 40)):
            g = torch.Generator(device=device).manual_seed(l * 1000 + n)

            def rand(*s):
                return torch.randn(*s, generator=g, device=device).to(dtype)

            q = rand(2, l, h, d).transpose(1, 2)
            kc, vc = rand(1, hkv, n, d), rand(1, hkv, n, d)
            ks, vs = rand(2, l, hkv, d).transpose(1, 2), rand(2, l, hkv, d).transpose(1, 2)

            # Both forms of the kernel whatever the plan picks: split + merge, and one launch.
            for one_launch in (False, True):
                def run(q=q, kc=kc, vc=vc, ks=ks, vs=vs, one_launch=one_launch):
                    got = span_attention.span_attention_triton(q, kc, vc, ks, vs, one_launch=one_launch)
                    want = span_attention.span_attention_reference(*(t.float() for t in (q, kc, vc, ks, vs)))
                    return close(got, want, dtype)

                rows.append(case(name, "span_attention", dict(heads=[h, hkv, d], L=l, N=n, batch=2,
                                                              one_launch=one_launch), run))
    return rows


def unmask_select_rows(device, shapes, dtype) -> list[dict]:
    rows = []
    for name in shapes:
        vocab = VOCABS[name]
        for r in (3, 32) if name not in QUICK else (3,):
            g = torch.Generator(device=device).manual_seed(r + vocab)
            logits = (torch.randn(r, vocab, generator=g, device=device) * 4).to(dtype)

            def run(logits=logits):
                got = unmask_select.unmask_select_triton(logits)
                want = unmask_select.unmask_select_reference(logits)
                ok_tok, bad = close(got.token, want.token, dtype)
                ok_p, err_p = close(got.prob, want.prob, torch.float32)
                ok_e, err_e = close(got.entropy, want.entropy, torch.float16)
                ok_m, err_m = close(got.margin, want.margin, torch.float32)
                return ok_tok and ok_p and ok_e and ok_m, max(bad, err_p, err_e, err_m)

            rows.append(case(name, "unmask_select", dict(rows=r, vocab=vocab), run))
    return rows


def rms_norm_rows(device, shapes, dtype) -> list[dict]:
    rows = []
    for name in shapes:
        dim = DIMS[name]
        g = torch.Generator(device=device).manual_seed(dim)
        x, res = (torch.randn(33, dim, generator=g, device=device).to(dtype) for _ in range(2))
        w = (torch.rand(dim, generator=g, device=device) + 0.5).to(dtype)

        def run(x=x, res=res, w=w):
            out, summed = rmsnorm.add_rms_norm_triton(x, res, w, 1e-6)
            want_out, want_sum = rmsnorm.add_rms_norm_reference(x.float(), res.float(), w.float(), 1e-6)
            ok_a, err_a = close(out, want_out, dtype)
            ok_b, err_b = close(summed, want_sum, dtype)
            return ok_a and ok_b, max(err_a, err_b)

        rows.append(case(name, "rms_norm", dict(rows=33, dim=dim), run))
    return rows


def rope_rows(device, shapes, dtype) -> list[dict]:
    rows = []
    for name in shapes:
        h, _, d = HEADS[name]
        x = torch.randn(2, 9, h, d, device=device).to(dtype).transpose(1, 2)
        angle = torch.arange(100, 109, device=device, dtype=torch.float32)[:, None] / (
            10000 ** (torch.arange(0, d // 2, device=device) * 2 / d))
        cos = torch.cat([angle.cos(), angle.cos()], -1).to(dtype)
        sin = torch.cat([angle.sin(), angle.sin()], -1).to(dtype)

        def run(x=x, cos=cos, sin=sin):
            got = rope.apply_rotary_triton(x, cos, sin)
            return close(got, rope.apply_rotary_reference(x.float(), cos.float(), sin.float()), dtype)

        rows.append(case(name, "rope", dict(heads=h, head_dim=d, T=9), run))
    return rows


def check_kernels(device: torch.device, quick: bool, drill_fail: str | None) -> dict:
    if not dispatch.triton_available():
        return {"skipped": "Triton is not installed: every kernel takes its torch reference"}
    if device.type != "cuda" and not dispatch.interpreting():
        return {"skipped": "no CUDA device and TRITON_INTERPRET is not 1"}
    if drill_fail:
        fn = {"span_attention": (span_attention, "span_attention_triton"),
              "unmask_select": (unmask_select, "unmask_select_triton"),
              "rms_norm": (rmsnorm, "add_rms_norm_triton"), "rope": (rope, "apply_rotary_triton")}[drill_fail]

        def drill(*args, **kwargs):
            raise RuntimeError(f"drill: {drill_fail} made to fail (--drill-fail)")

        setattr(fn[0], fn[1], drill)
    shapes = QUICK if quick or device.type != "cuda" else tuple(HEADS)
    # The interpreter has no bf16 dot (docs/kernels.md): it checks fp32; the GPU checks what inference runs.
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    rows = (span_attention_rows(device, shapes, dtype) + unmask_select_rows(device, shapes, dtype)
            + rms_norm_rows(device, shapes, dtype) + rope_rows(device, shapes, dtype))
    failed = sorted({r["kernel"] for r in rows if not r["ok"]})
    return {"dtype": str(dtype).removeprefix("torch."), "cases": rows, "failed_kernels": failed,
            "passed": sum(r["ok"] for r in rows), "total": len(rows)}


def infill_texts(model: str, device: str, requests: Path, env: dict, concurrency: int = 1,
                 flags: tuple[str, ...] = ()) -> dict:
    cmd = [sys.executable, "-m", "dllm_lsp", "infill", "--model", model, "--device", device, "--steps", "4",
           "--concurrency", str(concurrency), *flags]
    started = time.perf_counter()
    with open(requests, encoding="utf-8") as fh:
        done = subprocess.run(cmd, stdin=fh, capture_output=True, text=True, timeout=300, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"dllm-lsp infill on {device} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    replies = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    failed = [r for r in replies if "error" in r]
    if failed:
        # A request the engine could not answer here (a tensor on the wrong device, say) is a failure of
        # this run, not a completion that happens to differ from the other side's.
        raise RuntimeError(f"dllm-lsp infill on {device}: request {failed[0].get('id')!r} failed: {failed[0]['error']}")
    return {"texts": {r["id"]: r["completion"] for r in replies},
            "seconds": round(time.perf_counter() - started, 2)}


# One `dllm-lsp infill` process: (model, device, concurrency, flags, environment settings).
Run = tuple[str, str, int, tuple[str, ...], tuple[str, ...]]
DEVICE_STATE = (f"{RUN_STATE_ENV}=device",)     # the decode runs' state on the model's device


def described(run: Run) -> str:
    """A run as a note names it: `cuda x1 --cuda-graphs`, `cuda x1 DLLM_LSP_RUN_STATE=device`."""
    _, device, concurrency, flags, settings = run
    return " ".join([device, f"x{concurrency}", *flags, *settings])


def run_state_fallback(engine_rows: list[dict]) -> str | None:
    """"device" when a model's decode runs failed on the device with their state on the host (the
    default) but ran with it on the device: the job then keeps it there for the rest of the
    lease (denoise.state_device), so the benchmarks still measure. None otherwise."""
    pairs = [row for row in engine_rows if row.get("run_state_pair")]
    return "device" if any(p.get("host_failed") and not p.get("device_failed") for p in pairs) else None


def write_tiny(folder: Path, layout: str) -> Path:
    """A tiny random checkpoint of `layout`, a masked-diffusion or a block-diffusion one."""
    if layout in BLOCK_LAYOUTS:
        return write_tiny_block_checkpoint(folder, layout)
    return write_tiny_checkpoint(folder, layout)


def check_engine(device: torch.device, families: list[str], env: dict,
                 on_row: Callable[[list[dict]], None] = lambda rows: None) -> list[dict]:
    """The engine comparison's rows; `on_row(rows so far)` after each, so a box that ends the
    check midway still leaves the rows finished by then."""
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        requests = Path(tmp) / "requests.jsonl"
        requests.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
        # The device's shipped default by its folder, so the CPU run loads the same model: models/DEFAULT
        # may name another default for CPUs (the small preview), which would compare two models.
        shipped = default_model_path(device.type)
        models = [(f"embedded (shipped default on {device.type}: {shipped.name})", str(shipped))]
        for layout in families:
            folder = Path(tmp) / layout
            write_tiny(folder, layout)
            models.append((f"{layout} (tiny random)", str(folder)))
        # Every (model, device) run is its own process, mostly start-up (imports, CUDA, the load):
        # all of them at once, so the comparison fits its share of the check's box.
        # On a CPU device (the dry run) "cpu" and the device are the same run: start it once.
        # The shipped model once more on the device with every request in flight at once: its
        # shared steps (the eval phase's, the server's) against the same requests one at a time.
        # And once with its steady steps replayed from CUDA graphs (`--cuda-graphs`) against eager steps.
        on = str(device)
        embedded = str(shipped)
        pairs: list[tuple[str, Run, Run]] = [(label, (model, "cpu", 1, (), ()), (model, on, 1, (), ()))
                                             for label, model in models]
        # The decode runs' state on the host (the default) against on the device (denoise.state_device),
        # for the embedded model, an open checkpoint (its prefill takes the run's canvas), and each other
        # decode loop checked: variable-length (DreamOn) and block-wise (the first of each).
        tiny = list(zip(models[1:], families))
        dreamon = [model for model, layout in tiny if layout == "dreamon"][:1]
        blockwise = [model for model, layout in tiny if layout in BLOCK_LAYOUTS][:1]
        checked = [(f"embedded ({shipped.name})", embedded), *models[1:2], *dreamon, *blockwise]
        for label, model in dict.fromkeys(checked):     # once each (the first checkpoint may be DreamOn)
            pairs.append((f"{label}, run state on the host against on the device",
                          (model, on, 1, (), ()), (model, on, 1, (), DEVICE_STATE)))
        # After them (their runs start later when the pool is full): shared steps and CUDA-graph steps;
        # the run-state pairs go first since every later phase depends on their verdict.
        pairs.append((f"embedded ({shipped.name}), shared steps on the device against one at a time",
                      (embedded, on, 1, (), ()), (embedded, on, len(REQUESTS), (), ())))
        pairs.append((f"embedded ({shipped.name}), CUDA-graph steps on the device against eager ones",
                      (embedded, on, 1, (), ()), (embedded, on, 1, ("--cuda-graphs",), ())))
        # An open checkpoint's cached steps replayed from graphs (checkpoints/session.py) against eager ones.
        for label, model in models[1:2]:
            pairs.append((f"{label}, CUDA-graph cached steps on the device against eager ones",
                          (model, on, 1, (), ()), (model, on, 1, ("--cuda-graphs",), ())))
        runs = list(dict.fromkeys(run for _, *both in pairs for run in both))
        with ThreadPoolExecutor(max_workers=min(len(runs), max(usable_cpus(), 2))) as pool:
            futures = {run: pool.submit(infill_texts, *run[:2], requests, {**env, **dict(
                setting.split("=", 1) for setting in run[4])}, run[2], run[3]) for run in runs}
            for label, first, second in pairs:
                row = {"model": label}
                if second[4] == DEVICE_STATE:
                    row.update(run_state_pair=True, host_failed=futures[first].exception() is not None,
                               device_failed=futures[second].exception() is not None)
                try:
                    here, there = futures[first].result(), futures[second].result()
                    same = sum(here["texts"][k] == there["texts"].get(k) for k in here["texts"])
                    row.update(ok=True, agree=f"{same}/{len(here['texts'])}", cpu=here, device=there)
                    if same < len(here["texts"]):
                        # Greedy ties on random weights (bf16 on the GPU, fp32 here) flip tokens: noted, not a failure.
                        row["note"] = f"completions differ between {described(first)} and {described(second)}"
                except Exception as exc:
                    row.update(ok=False, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
                rows.append(row)
                on_row(rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dllm_lsp.gpujob.check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="test shapes only, one checkpoint family")
    ap.add_argument("--families", default=None, help="comma-separated tiny checkpoint layouts (default: all)")
    ap.add_argument("--drill-fail", choices=dispatch.KERNEL_NAMES, default=None)
    a = ap.parse_args(argv)
    device = torch.device(a.device)
    families = a.families.split(",") if a.families else (["dream"] if a.quick else list(CHECK_LAYOUTS))
    unknown = sorted(set(families) - set(LAYOUTS) - set(BLOCK_LAYOUTS) - {""})
    if unknown:
        ap.error(f"--families: unknown layout(s) {', '.join(unknown)}; choose from {', '.join(LAYOUTS + BLOCK_LAYOUTS)}")
    report = {"device": str(device), "environment": environment(str(device))}
    report["kernels"] = check_kernels(device, a.quick, a.drill_fail)
    print(json.dumps({"kernels": {k: v for k, v in report["kernels"].items() if k != "cases"}}), flush=True)
    # The engine comparison must not run a kernel that just failed: the children inherit the list.
    failed = report["kernels"].get("failed_kernels", [])
    env = dict(os.environ)
    if failed:
        env["DLLM_LSP_DISABLE_KERNELS"] = ",".join(filter(None, [env.get("DLLM_LSP_DISABLE_KERNELS", ""), *failed]))
    write(a.out, report)   # the kernel verdicts count even if the engine comparison runs out of time

    def landed(rows: list[dict]) -> None:
        # Each row as it completes, to the log and the report: the job's box may end the check midway.
        print(json.dumps({k: rows[-1].get(k) for k in ("model", "ok", "agree", "error", "note")}), flush=True)
        write(a.out, {**report, "engine": rows, "engine_finished": False, "run_state_fallback": run_state_fallback(rows)})

    rows = check_engine(device, [f for f in families if f], env, landed)
    report.update(engine=rows, engine_finished=True, run_state_fallback=run_state_fallback(rows))
    write(a.out, report)
    return 0


def write(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    sys.exit(main())

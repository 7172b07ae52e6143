"""Compile every Triton kernel ahead of time for an sm_90 (H100/H200) target with the ptxas
that ships in the triton wheel, at the launch parameters the wrappers choose for Dream-7B
shapes. No GPU is needed: this catches code that the interpreter accepts but the compiler
rejects, and tiles that would not fit in shared memory. Prints one JSON line per kernel.

Run as a script in a process without TRITON_INTERPRET (tests/kernels/test_compile_cuda.py):
    python tests/kernels/compile_for_cuda.py [CAPABILITY]
"""
import json
import os
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from dllm_lsp.kernels import rmsnorm, rope, span_attention, unmask_select

TYPES = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.float16: "fp16"}


def compile_kernel(fn, pointer_types: dict, float_args: set, meta: dict, capability: int,
                   unit_strides: tuple = (), aligned: tuple = ()) -> dict:
    """Specialised as a launch on contiguous, 16-aligned tensors would be: unit strides become
    constants, pointers and the `aligned` integers are known multiples of 16."""
    meta = dict(meta)
    options = {k: meta.pop(k) for k in ("num_warps", "num_stages") if k in meta}
    shown = dict(meta)
    meta.update({name: 1 for name in unit_strides})
    signature = {}
    for name in fn.arg_names:
        if name in meta:
            signature[name] = "constexpr"
        elif name in pointer_types:
            signature[name] = "*" + pointer_types[name]
        else:
            signature[name] = "fp32" if name in float_args else "i32"
    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]] for name in (*pointer_types, *aligned)}
    kernel = triton.compile(ASTSource(fn, signature, meta, attrs), target=GPUTarget("cuda", capability, 32),
                            options=options)
    return {"kernel": fn.__name__, "meta": shown, "shared_bytes": kernel.metadata.shared}


def main(capability: int = 90) -> None:
    assert os.environ.get("TRITON_INTERPRET", "0") != "1", "run without TRITON_INTERPRET"
    results = []
    # bf16 only: fp32 attention on CUDA is routed to SDPA (span_attention.tile_config says why).
    for dtype in (torch.bfloat16,):
        t = TYPES[dtype]
        fn = span_attention._span_attention_split_kernel
        strides = [n for n in fn.arg_names if n.startswith("s") and n[1] in "qkv"]
        # Dream-7B heads at L = 32, planned for an H100 (227 KiB) and for a 99 KiB GPU, as splits
        # (partials for the merge) and as the one-launch pass (the output written directly).
        for budget in (227 * 1024, 99 * 1024):
            for one_pass in (False, True):
                row = compile_kernel(
                    fn, {**{n: t for n in ("Q", "KC", "VC", "KS", "VS", "OUT")}, "O_PART": "fp32", "LSE_PART": "fp32"},
                    {"qk_scale"}, {**span_attention.tile_config(dtype, 128, 7 * 32, budget), "ONE_PASS": one_pass},
                    capability, unit_strides=tuple(n for n in strides if n.endswith("_d")),
                    aligned=(*(n for n in strides if not n.endswith("_d")), "D", "keys_per_split"))
                results.append({**row, "shared_budget": budget})
    results.append(compile_kernel(
        span_attention._span_attention_merge_kernel, {"O_PART": "fp32", "LSE_PART": "fp32", "OUT": "bf16"},
        set(), dict(BLOCK_R=span_attention.MERGE_ROWS, BLOCK_S=32, BLOCK_D=128), capability))
    block_v = unmask_select.default_block_v()
    parts = {n: "fp32" for n in ("P_M", "P_S", "P_T", "P_TOP1", "P_TOP2", "P_GBEST", "P_GX")}
    parts.update(P_IDX1="i32", P_GIDX="i32")
    for sample in (False, True):
        results.append(compile_kernel(
            unmask_select._select_split_kernel, {"X": "bf16", "SEED": "i64", **parts}, {"inv_temp"},
            dict(SAMPLE=sample, BLOCK_V=block_v, num_warps=unmask_select.split_num_warps(block_v)), capability))
        results.append(compile_kernel(
            unmask_select._select_merge_kernel,
            {**parts, "TOKEN": "i64", "PROB": "fp32", "MARGIN": "fp32", "ENTROPY": "fp32"}, set(),
            dict(SAMPLE=sample, BLOCK_R=unmask_select.MERGE_ROWS, BLOCK_S=32), capability))
    for residual in (False, True):
        results.append(compile_kernel(
            rmsnorm._rms_norm_kernel, {n: "bf16" for n in ("X", "RES", "W", "Y", "SUM")}, {"eps"},
            dict(HAS_RESIDUAL=residual, BLOCK_D=4096, num_warps=rmsnorm.norm_num_warps(4096)), capability))
    results.append(compile_kernel(
        rope._rotary_kernel, {n: "bf16" for n in ("X", "COS", "SIN", "Y")}, set(),
        dict(BLOCK_H=32, BLOCK_HALF=64, num_warps=4), capability,
        unit_strides=("sx_d",)))
    for row in results:
        print(json.dumps(row))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 90)

"""The unattended GPU job: one command that, on a fresh GPU machine, checks the kernels and the
CUDA path, builds a corpus, trains (or continues) the embedded model, evaluates it, runs the
benchmarks, and packs everything worth committing, in that order, within a time budget, leaving
a usable result at every point. See docs/gpu-job.md.

Phases run as child processes of the job (`python -m dllm_lsp ...`, the same commands a person
would type), so a crash, a hang or a CUDA fault in one phase costs that phase only, and a time
box is enforced by ending the child.
"""

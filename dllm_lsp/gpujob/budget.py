"""Time boxes of the GPU job, derived from its total minutes.

Phases run in priority order. Each phase before training gets a fixed share (capped); training
gets whatever is left after reserving the shares of the phases after it; evaluation and the
benchmarks then take what training left them, the pack step always keeps its reserve. A phase
that ends early gives its time to the phases after it. A job may run a subset of the phases
(`--phases`, e.g. the benchmarks a past lease had no time for): a phase left out keeps nothing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

PHASES = ("check", "corpus", "train", "eval", "bench", "pack")
SHARE = {"check": 0.08, "corpus": 0.10, "eval": 0.14, "bench": 0.18, "pack": 0.03}
CAP_S = {"check": 240.0, "corpus": 300.0}
# The check's floor: on the H200 its 41 s box held the kernel verdicts but not the CPU/CUDA engine
# comparison (a dozen processes starting at once, 9-13 s each with 8 of them running). Since then
# span attention's one-launch form (six more compiles), the CUDA-graph runs, the run-state pairs and
# the DreamOn and block-diffusion checkpoints joined it: about 21 processes on 16 cores, two waves.
# Its rows are the first CUDA run of two decode loops and decide the later phases' run state, so
# the floor keeps about twice that estimate; a check that ends early gives the rest to the benchmarks.
FLOOR_S = {"check": 150.0, "corpus": 20.0, "train": 20.0, "eval": 20.0, "pack": 15.0}


def parse_phases(spec: str | None) -> tuple[str, ...]:
    """`--phases check,eval,bench` -> those phases in PHASES order, pack always included."""
    if not spec:
        return PHASES
    wanted = {name.strip() for name in spec.split(",") if name.strip()}
    unknown = sorted(wanted - set(PHASES))
    if unknown:
        raise ValueError(f"--phases: unknown phase(s) {', '.join(unknown)}; choose from {', '.join(PHASES)}")
    return tuple(name for name in PHASES if name in wanted or name == "pack")


@dataclass
class Budget:
    minutes: float
    clock: object = time.monotonic
    start: float = field(default=0.0)
    phases: tuple[str, ...] = PHASES    # the phases this job runs: only they keep time for themselves
    hurried: bool = False   # told to pack now (`gpujob wait --pack-by`): no phase but pack gets time

    def __post_init__(self) -> None:
        if not 0 < self.minutes < float("inf"):   # NaN too: no box would ever end, nothing be packed
            raise ValueError(f"--minutes must be a positive number, not {self.minutes}")
        self.start = self.clock()

    @property
    def total_s(self) -> float:
        return self.minutes * 60.0

    def elapsed(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float:
        return max(0.0, self.total_s - self.elapsed())

    def reserve_after(self, phase: str) -> float:
        """Seconds the phases after `phase` keep for themselves."""
        later = [p for p in PHASES[PHASES.index(phase) + 1:] if p in self.phases]
        return sum(max(SHARE.get(p, 0.0) * self.total_s, FLOOR_S.get(p, 0.0)) for p in later)

    def box(self, phase: str) -> float:
        """Seconds `phase` may run if it starts now (0 or less: no time for it)."""
        if self.hurried:
            return max(self.remaining(), FLOOR_S["pack"]) if phase == "pack" else 0.0
        available = self.remaining() - self.reserve_after(phase)
        if phase in ("check", "corpus"):
            return min(available, max(FLOOR_S[phase], min(SHARE[phase] * self.total_s, CAP_S[phase])))
        return available

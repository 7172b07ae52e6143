"""How many CPU cores this process may use: what sizes its worker pools.

`os.cpu_count()` is the host's count. In a container limited by a CPU quota (`docker --cpus`,
Kubernetes limits: cgroup `cpu.max`, or `cpu.cfs_quota_us` under cgroup v1) the host may have
200 cores where the process gets 16, and a pool sized by the host's count starts 200 processes,
each holding its own copy of the corpus. So the count is the smallest of the host's cores, the
cores the process is pinned to (affinity), and the quota of its cgroup.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def usable_cpus(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    count = os.cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        count = min(count, len(os.sched_getaffinity(0)))
    quota = cgroup_cpu_quota(cgroup_root, proc_cgroup)
    if quota is not None:
        count = min(count, max(1, math.floor(quota)))   # 1.5 cores of quota keep 1 busy, not 2
    return count


def cgroup_cpu_quota(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The CPU quota (in cores) of this process's cgroup, or None when it has none."""
    quotas = [q for q in (_quota(path) for path in _quota_files(cgroup_root, proc_cgroup)) if q is not None]
    return min(quotas) if quotas else None


def _quota_files(root: Path, proc_cgroup: Path) -> list[Path]:
    # A container's own cgroup is usually the namespace's root; outside one, it is a path below
    # the root (from /proc/self/cgroup). Both are looked at.
    paths = {"": "", "cpu": ""}
    try:
        for line in proc_cgroup.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                paths[""] = path.strip("/")
            elif "cpu" in controllers.split(","):
                paths["cpu"] = path.strip("/")
    except (OSError, ValueError):
        pass
    files = []
    for below in {"", paths[""]}:
        files.append(root / below / "cpu.max")
    for controller in ("cpu", "cpu,cpuacct"):
        for below in {"", paths["cpu"]}:
            files.append(root / controller / below / "cpu.cfs_quota_us")
    return files


def _quota(path: Path) -> float | None:
    try:
        if path.name == "cpu.max":
            limit, period = path.read_text().split()[:2]
            return None if limit == "max" else int(limit) / int(period)
        limit = int(path.read_text().strip())
        period = int((path.parent / "cpu.cfs_period_us").read_text().strip())
        return None if limit <= 0 else limit / period
    except (OSError, ValueError, ZeroDivisionError):
        return None

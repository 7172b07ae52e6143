"""Worker pools are sized by the cores the process may use, not the host's count: a cgroup CPU
quota (v2 cpu.max, v1 cpu.cfs_quota_us), found at the namespace root or below it at the path
/proc/self/cgroup names, caps it."""
import os
from pathlib import Path

from dllm_lsp.bench.environment import environment
from dllm_lsp.cpus import cgroup_cpu_quota, usable_cpus

ALLOWED = len(os.sched_getaffinity(0))


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_no_cgroup_files_means_the_affinity_count(tmp_path):
    proc = tmp_path / "proc-cgroup"
    write(proc, "0::/\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) is None
    assert usable_cpus(tmp_path / "cg", proc) == ALLOWED


def test_cgroup_v2_quota_at_the_root_caps_the_count(tmp_path):
    proc = tmp_path / "proc-cgroup"
    write(proc, "0::/\n")
    write(tmp_path / "cg" / "cpu.max", "150000 100000\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) == 1.5
    assert usable_cpus(tmp_path / "cg", proc) == 1          # 1.5 cores keep one worker busy
    write(tmp_path / "cg" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) is None


def test_cgroup_v2_quota_below_the_root_is_found_through_proc(tmp_path):
    proc = tmp_path / "proc-cgroup"
    write(proc, "0::/system.slice/job.scope\n")
    write(tmp_path / "cg" / "cpu.max", "max 100000\n")
    write(tmp_path / "cg" / "system.slice" / "job.scope" / "cpu.max", "100000 100000\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) == 1.0
    assert usable_cpus(tmp_path / "cg", proc) == 1


def test_cgroup_v1_quota_and_no_quota(tmp_path):
    proc = tmp_path / "proc-cgroup"
    write(proc, "4:memory:/x\n1:cpu,cpuacct:/docker/abc\n")
    cpu = tmp_path / "cg" / "cpu,cpuacct" / "docker" / "abc"
    write(cpu / "cpu.cfs_quota_us", "100000\n")
    write(cpu / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) == 1.0
    write(cpu / "cpu.cfs_quota_us", "-1\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) is None


def test_unreadable_files_are_no_quota(tmp_path):
    proc = tmp_path / "proc-cgroup"
    write(proc, "garbage")
    write(tmp_path / "cg" / "cpu.max", "not numbers\n")
    assert cgroup_cpu_quota(tmp_path / "cg", proc) is None
    assert usable_cpus(tmp_path / "cg", tmp_path / "missing") == ALLOWED


def test_benchmarks_record_usable_and_host_cores():
    env = environment("cpu")
    assert 1 <= env["cpus"] <= env["host_cpus"]

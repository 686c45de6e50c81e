"""CPU accounting beside the counters: was the machine, or the load generator, CPU-bound?

Each sample of the groups' I/O counters also takes the machine's busy time (/proc/stat)
and the CPU time of the trial cgroup (cgroups/trial.py: every fio process and the tenant,
exited ones included), at the same instant, so a steady window's CPU use is known exactly
for that window."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from iolab.cgroups.base import Group
from iolab.cgroups.counters import IoCounters
from iolab.targets.base import WeightedGroups


def machine_times() -> tuple[int, int]:
    """(total, idle+iowait) jiffies from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    return sum(vals), vals[3] + (vals[4] if len(vals) > 4 else 0)


@dataclass
class CpuSample:
    machine_total: int
    machine_idle: int
    generator_s: float = 0.0  # CPU seconds of the trial's processes so far (its cgroup)


class CountingReader:
    """The sampler's reader: group counters, plus machine and generator CPU at the same instant."""

    def __init__(self, groups: WeightedGroups, members: list[Group], generator_cpu_s: Callable[[], float]):
        self.groups = groups
        self.members = members
        self.generator_cpu_s = generator_cpu_s
        self.cpu: list[CpuSample] = []

    def __call__(self) -> dict[str, IoCounters]:
        counters = {g.name: self.groups.read_counters(g) for g in self.members}
        total, idle = machine_times()
        self.cpu.append(CpuSample(total, idle, self.generator_cpu_s()))
        return counters


def cpu_between(a: CpuSample, b: CpuSample, dt: float) -> tuple[float, float]:
    """(machine busy 0..1, generator busy 0..1 of the machine) between two samples."""
    total = max(b.machine_total - a.machine_total, 1)
    machine = 1.0 - (b.machine_idle - a.machine_idle) / total
    cores = os.cpu_count() or 1
    gen = (b.generator_s - a.generator_s) / max(dt, 1e-9) / cores
    return machine, min(max(gen, 0.0), 1.0)

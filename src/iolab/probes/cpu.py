"""Whole-machine CPU use over the trial (/proc/stat), to tell a CPU-starved run from a slow disk."""

from __future__ import annotations

import os
from typing import Any, ClassVar

from iolab.core.metrics import Metric
from iolab.probes.base import Probe
from iolab.targets.base import Placement


def _cpu_times() -> tuple[int, int, int]:
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)  # idle + iowait
    iowait = vals[4] if len(vals) > 4 else 0
    return sum(vals), idle, iowait


class MachineCpu(Probe):
    name: ClassVar[str] = "machine_cpu"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("busy", "fraction", "neither", "share of all CPU time that was not idle or iowait"),
        Metric("iowait", "fraction", "neither", "share of all CPU time in iowait"),
    )
    attributes: ClassVar[tuple[str, ...]] = ("cores",)

    def start(self, placement: Placement) -> None:
        self.t0 = _cpu_times()

    def stop(self) -> dict[str, Any]:
        total, idle, iowait = (a - b for a, b in zip(_cpu_times(), self.t0, strict=True))
        total = max(total, 1)
        return {"busy": 1.0 - idle / total, "iowait": iowait / total, "cores": os.cpu_count()}

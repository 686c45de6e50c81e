"""Kind name -> implementing class, imported lazily so `iolab doctor` never needs QEMU code.

Adding a target, workload or probe = one module + one line here.
"""

from __future__ import annotations

import importlib
from typing import Any

TARGETS: dict[str, str] = {
    "host": "iolab.targets.hostdir:HostDirTarget",
    "loop": "iolab.targets.loop:LoopTarget",
    "device": "iolab.targets.blockdev:BlockDeviceTarget",
    "qemu": "iolab.targets.qemu_guest:QemuGuestTarget",
    "cgroups": "iolab.targets.cgroup_set:CgroupSetTarget",
    "fleet": "iolab.targets.fleet:FleetTarget",
    "fsimage": "iolab.targets.fsimage:FsImageTarget",
}

WORKLOADS: dict[str, str] = {
    "fio": "iolab.workloads.fio:FioWorkload",
    "fio-jobfile": "iolab.workloads.fio_jobfile:FioJobFileWorkload",
    "iozone": "iolab.workloads.iozone:IozoneWorkload",
    "writemode": "iolab.workloads.writemode:WriteModeWorkload",
    "fio-groups": "iolab.workloads.fio_groups:FioGroupsWorkload",
    "sync-writes": "iolab.workloads.sync_writes:SyncWritesWorkload",
    "primes": "iolab.workloads.primes:PrimesWorkload",
    "sysbench-cpu": "iolab.workloads.sysbench_cpu:SysbenchCpuWorkload",
    "stream": "iolab.workloads.stream:StreamWorkload",
    "iperf3": "iolab.workloads.iperf3:Iperf3Workload",
    "varmail": "iolab.workloads.varmail:VarmailWorkload",
    "ycsb": "iolab.workloads.ycsb:YcsbWorkload",
    "qemu_img_bench": "iolab.workloads.qemu_img_bench:QemuImgBenchWorkload",
}


def load(table: dict[str, str], kind: str) -> Any:
    """The class for `kind`; KeyError if unknown (callers turn that into a spec error)."""
    module, _, name = table[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def target_class(kind: str) -> Any:
    return load(TARGETS, kind)


def workload_class(kind: str) -> Any:
    return load(WORKLOADS, kind)

"""The probes every trial runs when they apply. A new probe = one module + one line here."""

from __future__ import annotations

import importlib

from iolab.core.metrics import MetricSet
from iolab.probes.base import Probe

PROBES = [
    "iolab.probes.diskstats:HostDiskStats",
    "iolab.probes.under_disk:UnderDiskStats",
    "iolab.probes.pagecache:PageCache",
    "iolab.probes.fs_journal:FsJournal",
    "iolab.probes.cpu:MachineCpu",
    "iolab.probes.qmp_blockstats:QmpBlockStats",
    "iolab.probes.guest_diskstats:GuestDiskStats",
    "iolab.probes.qemu_syscalls:QemuSyscalls",
    "iolab.probes.guest_blocktrace:GuestBlockTrace",
]


def probe_classes() -> list[type[Probe]]:
    out = []
    for ref in PROBES:
        module, _, name = ref.partition(":")
        try:
            out.append(getattr(importlib.import_module(module), name))
        except (ModuleNotFoundError, AttributeError):
            continue  # an optional probe whose module is not part of this build
    return out


def probe_class(name: str) -> type[Probe] | None:
    return next((p for p in probe_classes() if p.name == name), None)


def metric_set(name: str) -> MetricSet:
    """The declarations of one probe's result keys (empty for a probe this build does not have)."""
    cls = probe_class(name)
    return MetricSet(cls.metrics if cls else ())


def attributes(name: str) -> tuple[str, ...]:
    """Keys of a probe's result that are not measurements (device names, pids, notes)."""
    cls = probe_class(name)
    return cls.attributes if cls else ()

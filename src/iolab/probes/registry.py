"""The probes every trial runs when they apply. A new probe = one module + one line here."""

from __future__ import annotations

import importlib

from iolab.probes.base import Probe

PROBES = [
    "iolab.probes.diskstats:HostDiskStats",
    "iolab.probes.pagecache:PageCache",
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

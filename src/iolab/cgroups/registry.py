"""Backend names -> classes, opening one for a device on this machine, and which work here.

"none" and "bfq" are aliases resolved from the mounted hierarchy (v1 blkio if mounted,
else v2), so a study spec can say `controller: bfq` and run on either kind of machine.
"""

from __future__ import annotations

import os
from typing import Any

from iolab.cgroups import scheduler
from iolab.cgroups.base import Backend
from iolab.cgroups.detect import Mounts, mounts, v1_files, v2_files
from iolab.cgroups.device import resolve
from iolab.cgroups.none import NoneV1, NoneV2
from iolab.cgroups.v1_bfq import V1Bfq
from iolab.cgroups.v1_cfq import V1Cfq
from iolab.cgroups.v2_bfq import V2Bfq
from iolab.cgroups.v2_iocost import V2Iocost
from iolab.cgroups.v2_max import V2Max
from iolab.core.errors import CapabilityMissing
from iolab.core.resources import Ledger

BACKENDS: dict[str, type[Backend]] = {
    cls.name: cls for cls in (V1Bfq, V1Cfq, V2Bfq, V2Iocost, V2Max, NoneV1, NoneV2)
}
ALIASES = {"bfq": ("v1-bfq", "v2-bfq"), "none": ("v1-none", "v2-none"),
           "cfq": ("v1-cfq", "v1-cfq"), "iocost": ("v2-iocost", "v2-iocost"),
           "max": ("v2-max", "v2-max")}


def resolve_name(name: str, m: Mounts) -> str:
    """'bfq' -> 'v1-bfq' on a machine with v1 blkio, 'v2-bfq' otherwise; full names pass."""
    if name in BACKENDS:
        return name
    if name not in ALIASES:
        raise ValueError(f"unknown cgroup backend {name!r} (have {sorted(BACKENDS) + sorted(ALIASES)})")
    v1, v2 = ALIASES[name]
    return v1 if m.v1_blkio is not None else v2


def open_backend(name: str, device: str, ledger: Ledger, m: Mounts | None = None) -> Backend:
    """A checked backend for `device`; CapabilityMissing says why it cannot run here."""
    m = m or mounts()
    cls = BACKENDS[resolve_name(name, m)]
    dev = resolve(device)
    reason = cls.unavailable_reason(m, dev)
    if reason:
        raise CapabilityMissing(f"cgroup backend {cls.name}: {reason}")
    root = m.v1_blkio if cls.version == 1 else m.v2
    assert root is not None, "unavailable_reason() is None only when the hierarchy is mounted"
    return cls(dev, ledger, root)


def backends_possible(m: Mounts, device: str | None = None) -> dict[str, str]:
    """Each backend -> "ok" or the reason it cannot run here (for doctor and errors)."""
    dev = resolve(device) if device else None
    out = {}
    for name, cls in BACKENDS.items():
        reason = cls.unavailable_reason(m, dev)
        out[name] = reason or "ok"
    return out


def describe(device: str | None = None) -> dict[str, Any]:
    """Everything about cgroup I/O control here, JSON-able, for the manifest and `iolab doctor`."""
    m = mounts()
    info: dict[str, Any] = {
        "kernel": os.uname().release,
        "v1_blkio_mount": str(m.v1_blkio) if m.v1_blkio else None,
        "v2_mount": str(m.v2) if m.v2 else None,
        "v2_controllers": m.v2_controllers,
        "v2_io_available": m.v2_io,
        "mode": _mode(m),
        "v1_files": v1_files(m.v1_blkio),
        "v2_files": v2_files(m.v2, m.v2_controllers),
        "iocost": bool(m.v2_io and m.v2 and (m.v2 / "io.cost.qos").exists()),
    }
    if device:
        dev = resolve(device)
        info["device"] = scheduler.queue_facts(dev)
    info["backends"] = backends_possible(m, device)
    return info


def _mode(m: Mounts) -> str:
    """'v1' (blkio on v1), 'v2' (io on the unified hierarchy), 'hybrid-v1', or 'none'."""
    if m.v1_blkio and m.v2:
        return "hybrid-v1"  # blkio bound to v1; cgroup2 mounted but without io
    if m.v1_blkio:
        return "v1"
    if m.v2_io:
        return "v2"
    return "none"

"""What cgroup I/O control this machine offers, found from /proc/self/mounts and the files.

A weight file that exists is not a weight that is enforced: *.bfq.weight needs BFQ on the
disk, io.weight needs iocost enabled, v1 blkio.weight needs CFQ (gone since Linux 5.0).
So detection reports the files per backend *and* what the disk can run, and doctor/the
manifest show both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from iolab.cgroups import scheduler
from iolab.cgroups.device import resolve

MOUNTS = Path("/proc/self/mounts")


@dataclass
class Mounts:
    """Where each hierarchy is mounted; None when absent."""

    v1_blkio: Path | None = None
    v2: Path | None = None
    v2_controllers: list[str] = field(default_factory=list)

    @property
    def v2_io(self) -> bool:
        return self.v2 is not None and "io" in self.v2_controllers


def mounts(text: str | None = None) -> Mounts:
    """Parse mounts: the v1 hierarchy carrying blkio and the cgroup2 mount."""
    text = MOUNTS.read_text() if text is None else text
    out = Mounts()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        where, fstype, opts = Path(parts[1]), parts[2], parts[3].split(",")
        if fstype == "cgroup" and "blkio" in opts and out.v1_blkio is None:
            out.v1_blkio = where
        elif fstype == "cgroup2" and out.v2 is None:
            out.v2 = where
    if out.v2 is not None:
        ctl = out.v2 / "cgroup.controllers"
        out.v2_controllers = ctl.read_text().split() if ctl.exists() else []
    return out


def v1_files(root: Path | None) -> dict[str, bool]:
    """Which v1 blkio interfaces exist. BFQ's weight exists only in child groups, so probe
    the cftype registry through the root's stat files (present iff BFQ is loaded)."""
    if root is None:
        return {}
    return {
        "blkio.weight": (root / "blkio.weight").exists(),  # CFQ (root has it when CFQ exists)
        "blkio.bfq.weight": (root / "blkio.bfq.io_serviced").exists(),
        "blkio.throttle": (root / "blkio.throttle.io_serviced").exists(),
    }


def v2_files(root: Path | None, controllers: list[str]) -> dict[str, bool]:
    """Which v2 io interfaces exist (io.cost.qos lives only in the root)."""
    if root is None or "io" not in controllers:
        return {}
    return {
        "io.cost.qos": (root / "io.cost.qos").exists(),
        "io.cost.model": (root / "io.cost.model").exists(),
        # io.weight/io.bfq.weight/io.max exist only in children with +io; their cftypes show
        # in the kernel as soon as the policy is registered, which we infer from the root.
        "io.weight": (root / "io.cost.qos").exists(),
        "io.bfq.weight": _bfq_loaded(),
        "io.max": True,
    }


def _bfq_loaded() -> bool:
    """BFQ is built in or loaded iff the kernel lists it as an elevator anywhere."""
    sysblock = Path("/sys/block")
    if not sysblock.is_dir():
        return False
    for dev in sysblock.iterdir():
        sched = dev / "queue" / "scheduler"
        try:
            if "bfq" in sched.read_text():
                return True
        except OSError:
            continue
    return Path("/sys/module/bfq").exists()


def backends_possible(m: Mounts, device: str | None = None) -> dict[str, str]:
    """Each backend -> "ok" or the reason it cannot run here (for doctor and errors)."""
    from iolab.cgroups.registry import BACKENDS

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

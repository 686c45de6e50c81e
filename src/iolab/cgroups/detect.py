"""What cgroup I/O control this machine offers, found from /proc/self/mounts and the files.

A weight file that exists is not a weight that is enforced: *.bfq.weight needs BFQ on the
disk, io.weight needs iocost enabled, v1 blkio.weight needs CFQ (gone since Linux 5.0).
So detection reports the files per backend *and* what the disk can run, and doctor/the
manifest show both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MOUNTS = Path("/proc/self/mounts")


@dataclass
class Mounts:
    """Where each hierarchy is mounted; None when absent."""

    v1_blkio: Path | None = None
    v2: Path | None = None
    # the v1 hierarchies a trial cgroup can use (cgroups.trial): CPU time and freezing
    v1_cpuacct: Path | None = None
    v1_freezer: Path | None = None
    # the v1 hierarchies that bound a trial (cgroups.trial.Bounds): processes and memory
    v1_pids: Path | None = None
    v1_memory: Path | None = None
    v2_controllers: list[str] = field(default_factory=list)

    @property
    def v2_io(self) -> bool:
        return self.v2 is not None and "io" in self.v2_controllers


def mounts(text: str | None = None) -> Mounts:
    """Parse mounts: the v1 hierarchies carrying blkio, cpuacct and freezer, and the cgroup2 mount."""
    text = MOUNTS.read_text() if text is None else text
    out = Mounts()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        where, fstype, opts = Path(parts[1]), parts[2], parts[3].split(",")
        if fstype == "cgroup":
            if "blkio" in opts and out.v1_blkio is None:
                out.v1_blkio = where
            if "cpuacct" in opts and out.v1_cpuacct is None:
                out.v1_cpuacct = where
            if "freezer" in opts and out.v1_freezer is None:
                out.v1_freezer = where
            if "pids" in opts and out.v1_pids is None:
                out.v1_pids = where
            if "memory" in opts and out.v1_memory is None:
                out.v1_memory = where
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

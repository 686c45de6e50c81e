"""What every cgroup v2 backend shares: +io in the parents, io.stat counters.

Processes in the root cgroup compete as one hidden group of weight 200, so test groups
sit under one empty parent of iolab's own; the parent gets +io in its subtree_control
so the children have io.* files. If the root itself lacks +io, it is enabled and that
change is recorded so it can be undone.
"""

from __future__ import annotations

from pathlib import Path

from iolab.cgroups import fs
from iolab.cgroups.base import Backend, Group
from iolab.cgroups.counters import IoCounters, from_v2
from iolab.cgroups.detect import Mounts
from iolab.cgroups.device import BlockDev

SUBTREE = "cgroup.subtree_control"


class V2Backend(Backend):
    version = 2

    @classmethod
    def unavailable_reason(cls, m: Mounts, dev: BlockDev | None) -> str | None:
        if m.v2 is None:
            return "no cgroup2 hierarchy is mounted"
        if not m.v2_io:
            return (f"the io controller is not in {m.v2}/cgroup.controllers "
                    "(blkio is bound to a v1 hierarchy, or the kernel lacks it)")
        return None

    def read_counters(self, group: Group) -> IoCounters:
        try:
            return from_v2((group.path / "io.stat").read_text(), self.dev.majmin)
        except FileNotFoundError:
            return IoCounters()

    def _prepare_parent(self, parent: Path) -> None:
        self._enable_io(self.root, record=True)
        self._enable_io(parent, record=False)  # removed with the parent

    def _enable_io(self, group: Path, record: bool) -> None:
        """Write +io to subtree_control; raise if it does not read back."""
        ctl = group / SUBTREE
        if "io" in _controllers(ctl):
            return
        if record:
            self._record("cgroup", str(ctl), action="write", value="-io")
        fs.write_value(ctl, "+io")
        if "io" not in _controllers(ctl):
            raise RuntimeError(f"{ctl}: +io written but not enabled")


def _controllers(ctl: Path) -> list[str]:
    try:
        return [c.lstrip("+") for c in ctl.read_text().split()]  # "+io" only in a fake tree
    except FileNotFoundError:
        return []

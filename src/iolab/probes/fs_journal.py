"""Journal commits of the ext4/jbd2 filesystem a trial writes to, as a delta over the trial.

Why: the cost of a synchronous write on a journaling filesystem depends on whether it also
changes metadata. An O_SYNC write that appends to a file changes the inode's size and so
forces a journal commit per write; the same write over a laid-out file usually does not.
Counting commits per write turns "these two numbers disagree" into a measured cause
(R3's append/overwrite distinction).

jbd2 keeps per-journal statistics in /proc/fs/jbd2/<dev>-<inode>/info; its first line is
"N transactions (M requested), each up to B blocks". Only the host's own filesystems are
visible there, so the probe applies to host placements that offer a directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, ClassVar

from iolab.core.metrics import Metric
from iolab.probes.base import Probe
from iolab.targets.base import Placement

JBD2 = Path("/proc/fs/jbd2")
_FIRST = re.compile(r"^\s*(\d+)\s+transactions\s+\((\d+)\s+requested\)")


def parse_info(text: str) -> tuple[int, int]:
    """(transactions, requested) from a jbd2 info file; ValueError if it is not one."""
    m = _FIRST.match(text)
    if not m:
        raise ValueError(f"not a jbd2 info file: {text[:80]!r}")
    return int(m.group(1)), int(m.group(2))


def journal_of(directory: str, root: Path = JBD2) -> Path | None:
    """The jbd2 info file of the filesystem holding `directory`, if it has a journal."""
    try:
        st = os.stat(directory)
    except OSError:
        return None
    link = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not link.exists():
        return None
    dev = os.path.basename(os.path.realpath(link))
    found = sorted(root.glob(f"{dev}-*/info")) if root.is_dir() else []
    return found[0] if found else None


class FsJournal(Probe):
    name: ClassVar[str] = "fs_journal"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("commits", "transactions", "neither", "jbd2 transactions committed over the trial"),
        Metric("requested", "transactions", "neither", "jbd2 commits requested (e.g. by fsync/O_SYNC) over the trial"),
    )
    attributes: ClassVar[tuple[str, ...]] = ("journal",)

    @classmethod
    def applies_to(cls, placement: Placement) -> bool:
        return placement.executor.name == "host" and bool(placement.directory) \
            and journal_of(str(placement.directory)) is not None

    def start(self, placement: Placement) -> None:
        self.info = journal_of(str(placement.directory))
        self.before = parse_info(self.info.read_text()) if self.info else (0, 0)

    def stop(self) -> dict[str, Any]:
        if self.info is None:
            return {}
        tx, req = parse_info(self.info.read_text())
        return {"journal": self.info.parent.name, "commits": tx - self.before[0],
                "requested": req - self.before[1]}

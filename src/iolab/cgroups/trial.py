"""The cgroup of one trial: every process a trial starts on the host lives in it.

Why a cgroup: a trial's processes do not stay in one process tree. fio puts each job
process in a session of its own, a job can fork a sleeper that outlives fio, and iolab
itself can be killed, leaving orphans. A cgroup holds every descendant whatever it does
to its session, group or parent, counts their CPU time exactly, and ends them all at once.

Two flavours, one interface (`layout()` picks):

* **v1**: a directory in the cpuacct hierarchy (CPU time: `cpuacct.usage`, `usage_user`,
  `usage_sys`) and one in the freezer hierarchy (ending: freeze, SIGKILL every process
  listed, thaw; nothing can fork in between). Chosen wherever both are mounted (a v1 or a
  hybrid machine): the unified hierarchy, where a hybrid init system tracks its services,
  is left alone.
* **v2**: one directory in the cgroup2 mount (CPU time: `cpu.stat` usage_usec, user_usec,
  system_usec, core files that need no controller; ending: `cgroup.kill`, Linux >= 5.14,
  else `cgroup.freeze` + SIGKILL + thaw).

`IOLAB_TRIAL_CGROUP=v1|v2` picks one when both exist (the tests run both). What is done to
one directory (its processes, their CPU time, ending them) is in cgroups/processes.py.

**Bounds** (`Bounds`): a trial may run at most `pids` tasks (processes and threads: a job
file's 16 sections x 256 clones, or a fork, stops there with EAGAIN, not at the machine's
pid_max) and use at most `memory` bytes (its page cache included: beyond it the trial's own
cache is reclaimed first, then the kernel's OOM killer ends a process *of the trial*, never a
neighbour). v1: the trial's directory also exists in the pids and memory hierarchies where
those are mounted (and are not blkio's); v2: the same directory's pids.max and memory.max,
where the root delegates those controllers. A machine without them runs unbounded, and the
manifest says so (`bounds`).

Layout: `iolab-<owner token>-trial-<id>` under each hierarchy root (the owner tag lets
`iolab clean --all` judge it by name). Every process an executor starts gets a leaf of its
own inside, `s-<spawn tag>`, so one process tree can be ended (a timeout, a leader that left
children behind) without touching the trial's others, and its CPU time read alone. A
process started outside any trial gets a leaf at the root, `iolab-<owner token>-spawn-<tag>`.

The cgroup-weights study's groups: a process is in one cgroup per hierarchy. On v1 and
hybrid machines the weighted groups are in the blkio hierarchy, which a trial cgroup never
uses (v1 is refused where blkio shares a hierarchy with cpuacct or freezer), so a fio
process is in its weighted blkio group and in its trial leaves at once. On v2 there is one
hierarchy, so the weighted groups are made *inside* the trial cgroup (`groups_parent()`);
a process placed in one leaves its own leaf for it but stays in the trial cgroup, which
`SpawnCgroup.place()` checks. The trial cgroup itself never holds a process (only its
leaves do), so v2 lets it enable +io for those children.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from iolab.cgroups import fs, processes
from iolab.cgroups.detect import Mounts, mounts
from iolab.core import owner as owners
from iolab.core.errors import CapabilityMissing, InputError
from iolab.core.resources import Ledger, Resource

FLAVOUR_ENV = "IOLAB_TRIAL_CGROUP"
FLAVOURS = ("auto", "v1", "v2")
TRIAL_LABEL = "trial"
SPAWN_LABEL = "spawn"


@dataclass(frozen=True)
class Layout:
    """Where trial cgroups live on this machine."""

    flavour: str  # "v1" or "v2"
    cpu_root: Path  # the cpuacct hierarchy (v1) or the cgroup2 mount (v2)
    kill_root: Path  # the freezer hierarchy (v1) or the cgroup2 mount (v2)
    bound_roots: tuple[Path, ...] = ()  # v1: the pids and memory hierarchies (Bounds)

    @property
    def roots(self) -> list[Path]:
        return list(dict.fromkeys([self.cpu_root, self.kill_root, *self.bound_roots]))


def reasons(m: Mounts) -> dict[str, str | None]:
    """Each flavour -> None if it can run here, else why not (for errors and `iolab doctor`)."""
    v1: str | None = None
    if m.v1_cpuacct is None or m.v1_freezer is None:
        missing = [n for n, p in (("cpuacct", m.v1_cpuacct), ("freezer", m.v1_freezer)) if p is None]
        v1 = f"no v1 {' and '.join(missing)} hierarchy is mounted"
    elif m.v1_blkio in (m.v1_cpuacct, m.v1_freezer):
        v1 = ("cpuacct or freezer shares the blkio hierarchy, where the cgroup-weights groups live "
              "(a process is in one group per hierarchy)")
    v2 = None if m.v2 is not None else "no cgroup2 hierarchy is mounted"
    return {"v1": v1, "v2": v2}


def layout(m: Mounts | None = None, flavour: str | None = None) -> Layout:
    """The flavour asked for (argument, else $IOLAB_TRIAL_CGROUP, else auto: v1, then v2)."""
    want = flavour or os.environ.get(FLAVOUR_ENV) or "auto"
    if want not in FLAVOURS:
        raise InputError(f"{FLAVOUR_ENV}={want[:40]!r}: expected one of {', '.join(FLAVOURS)}")
    m = m or mounts()
    why = reasons(m)
    for f in (("v1", "v2") if want == "auto" else (want,)):
        if why[f] is None:
            # reasons() says None only for a flavour whose hierarchies are mounted
            if f == "v1":
                assert m.v1_cpuacct is not None and m.v1_freezer is not None
                bound = tuple(p for p in (m.v1_pids, m.v1_memory) if p is not None and p != m.v1_blkio)
                return Layout("v1", m.v1_cpuacct, m.v1_freezer, bound)
            assert m.v2 is not None
            return Layout("v2", m.v2, m.v2)
    raise CapabilityMissing("no cgroup hierarchy can hold a trial's processes: "
                            + "; ".join(f"{f}: {r}" for f, r in why.items() if r))


def describe() -> dict[str, Any]:
    """For `iolab doctor`: the flavour trials use here and where, or why none can."""
    try:
        lay = layout()
    except (CapabilityMissing, InputError) as exc:
        return {"flavour": None, "error": str(exc)}
    return {"flavour": lay.flavour, "roots": [str(r) for r in lay.roots]}


# ---------------------------------------------------------------- the trial cgroup

TRIAL_PIDS_MAX = 4096  # tasks per trial: 16 x 256 fio clones, or a JVM's few hundred threads, fit
MEMORY_SHARE = 0.9  # of MemAvailable when the trial starts
MIN_MEMORY = 512 << 20


@dataclass(frozen=True)
class Bounds:
    """What one trial may use at most; memory None: MEMORY_SHARE of what is available now."""

    pids: int = TRIAL_PIDS_MAX
    memory: int | None = None

    def memory_bytes(self) -> int:
        return self.memory if self.memory is not None else max(MIN_MEMORY, int(MEMORY_SHARE * mem_available()))


def mem_available() -> int:
    """MemAvailable of /proc/meminfo in bytes (0 when unreadable)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class TrialCgroup:
    """One trial's cgroup. `create()` makes it (ledger first), `close()` ends and removes it."""

    def __init__(self, lay: Layout, name: str):
        self.layout = lay
        self.name = name
        self._ledger: Ledger | None = None
        self._res: Resource | None = None
        self.bounds: dict[str, int | None] = {"pids": None, "memory": None}  # what was written

    @property
    def dirs(self) -> list[Path]:
        return [root / self.name for root in self.layout.roots]

    @property
    def cpu_dir(self) -> Path:
        return self.layout.cpu_root / self.name

    @property
    def kill_dir(self) -> Path:
        return self.layout.kill_root / self.name

    @classmethod
    def create(cls, ledger: Ledger | None, label: str = TRIAL_LABEL, lay: Layout | None = None,
               bounds: Bounds | None = Bounds()) -> TrialCgroup:  # noqa: B008 -- frozen: safe to share
        """Make it, bounded (`Bounds`, None: unbounded); with a ledger, the entry is written
        (pending) before the first mkdir, so `iolab clean` ends and removes it after a kill -9
        at any instant. The bounds are written before any process can join."""
        cg = cls(lay or layout(), owners.tag(label, uuid.uuid4().hex[:8]))
        if ledger is None:
            processes.make(cg.dirs)
        else:
            with ledger.creating("cgroup", str(cg.kill_dir), action="kill", dirs=[str(d) for d in cg.dirs]) as res:
                processes.make(cg.dirs)
            cg._ledger, cg._res = ledger, res
        if bounds is not None:
            try:
                cg.limit(bounds)
            except BaseException:
                cg.close()
                raise
        return cg

    def limit(self, bounds: Bounds) -> None:
        """Write pids.max and the memory limit wherever the trial's directories offer them."""
        memory = bounds.memory_bytes()
        for d in self.dirs:
            if (d / "pids.max").exists():
                (d / "pids.max").write_text(str(bounds.pids))
                self.bounds["pids"] = bounds.pids
            for name in ("memory.limit_in_bytes", "memory.max"):  # v1, v2
                if (d / name).exists():
                    (d / name).write_text(str(memory))
                    self.bounds["memory"] = memory

    def spawn_group(self, tag: str) -> SpawnCgroup:
        """The leaf for one process (tree) an executor starts in this trial."""
        return SpawnCgroup(self.layout, f"{self.name}/s-{tag}", within=self)

    def contains(self, path: Path) -> bool:
        return any(path == d or d in path.parents for d in self.dirs)

    def groups_parent(self, root: Path) -> Path | None:
        """Where groups of the hierarchy mounted at `root` must be made so that a trial process
        placed in one stays in this trial: this cgroup's directory there (v2: the weighted
        groups of cgroup-weights), None when trials do not use that hierarchy (v1: blkio)."""
        return next((d for d in self.dirs if d.parent == root), None)

    def cpu_seconds(self) -> float:
        """CPU seconds of every process this trial started so far, exited ones included."""
        return processes.cpu_times(self.cpu_dir)[0]

    def pids(self) -> list[int]:
        return processes.pids(self.kill_dir)

    def kill(self) -> None:
        """End every process of the trial (all leaves) and wait until they are gone."""
        processes.kill(self.kill_dir)

    def close(self) -> None:
        """Kill what is left, remove every directory, forget the ledger entry. Idempotent."""
        processes.destroy(self.dirs)
        if self._ledger is not None and self._res is not None:
            self._ledger.forget(self._res)
            self._res = None

    def manifest(self) -> dict[str, Any]:
        """Facts for the trial manifest (read before close())."""
        total, user, system = processes.cpu_times(self.cpu_dir)
        return {"flavour": self.layout.flavour, "name": self.name, "cpu_s": round(total, 6),
                "cpu_user_s": round(user, 6), "cpu_sys_s": round(system, 6), "bounds": dict(self.bounds),
                **self.peaks()}

    def peaks(self) -> dict[str, int]:
        """The most tasks and memory the trial used (where the kernel keeps a high-water mark)."""
        out: dict[str, int] = {}
        for d in self.dirs:
            for name, key in (("pids.peak", "pids_peak"), ("memory.max_usage_in_bytes", "memory_peak"),
                              ("memory.peak", "memory_peak")):
                try:
                    out[key] = int((d / name).read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    continue
        return out


class SpawnCgroup:
    """The leaf of one process an executor starts, and of everything that process starts."""

    def __init__(self, lay: Layout, rel: str, within: TrialCgroup | None = None):
        self.layout = lay
        self.dirs = [root / rel for root in lay.roots]
        self.within = within
        self.cpu_dir = lay.cpu_root / rel
        self.kill_dir = lay.kill_root / rel
        self.extra: list[str] = []

    @classmethod
    def standalone(cls, tag: str, lay: Layout | None = None) -> SpawnCgroup:
        """A leaf at the hierarchy roots, for a process started outside any trial."""
        return cls(lay or layout(), owners.tag(SPAWN_LABEL, tag))

    def place(self, procs_files: Sequence[str]) -> None:
        """Also join these groups (ExecRequest.cgroup_procs), in order, after the leaf.

        A group in one of the leaf's hierarchies takes the process out of its leaf (v2:
        a weighted group): the process is then counted and ended there, and inside a trial
        the group must be inside the trial cgroup, or the process would leave the trial."""
        for f in procs_files:
            group = Path(os.path.normpath(Path(f).parent))  # lexical checks below: no `..` may fool them
            for root in self.layout.roots:
                if root not in group.parents:
                    continue
                if self.within is not None and not self.within.contains(group):
                    raise ValueError(f"{f}: a group outside the trial cgroup {self.within.name}; its process "
                                     "would leave the trial (make it under TrialCgroup.groups_parent())")
                if root == self.layout.cpu_root:
                    self.cpu_dir = group
                if root == self.layout.kill_root:
                    self.kill_dir = group
        self.extra = [str(f) for f in procs_files]

    def ledger_info(self) -> dict[str, Any]:
        return {"cgroups": [str(d) for d in self.dirs], "kill": str(self.kill_dir)}

    def make(self) -> None:
        processes.make(self.dirs)

    def procs_files(self) -> list[str]:
        """Every cgroup.procs the process joins, in order: its leaf, then the requested groups."""
        return [str(d / fs.PROCS) for d in self.dirs] + self.extra

    def join(self) -> None:
        """Move the calling process into the leaf, then into the groups placed (a preexec_fn:
        it runs in the child between fork and exec, so the first instruction is counted)."""
        pid = str(os.getpid())
        for procs in self.procs_files():
            with open(procs, "w") as f:
                f.write(pid)

    def populated(self) -> bool:
        return processes.populated(self.kill_dir)

    def pids(self) -> list[int]:
        """Every process of the tree now (the group it is counted and ended in)."""
        return processes.pids(self.kill_dir)

    def kill(self) -> None:
        processes.kill(self.kill_dir)

    def cpu_times(self) -> tuple[float, float, float]:
        """(total, user, system) CPU seconds of the process tree; zeros once its trial cgroup
        was removed (its trial ended it first: the time is in the trial's total)."""
        try:
            return processes.cpu_times(self.cpu_dir)
        except FileNotFoundError:
            if self.within is not None and not self.within.cpu_dir.exists():
                return 0.0, 0.0, 0.0
            raise

    def remove(self) -> None:
        """End what is left in the leaf and remove it (a requested group is its owner's to remove)."""
        processes.destroy(self.dirs)

"""`iolab clean`: undo what crashed or killed iolab processes left behind, never what a live one uses.

`iolab clean` undoes the ledgers of dead owners in this data dir, exactly: the processes
each started first (so nothing holds its devices), then its entries in dependency order.

`iolab clean --all` also sweeps by name, machine-wide, for resources whose ledger is out of
reach (another `$IOLAB_DATA`, a wiped state dir). Every name iolab creates carries its
owner's tag `iolab-o<pid>.<start>-...` (core.owner), so the sweep removes a thing only when
its owner is dead, whatever data dir that owner used. In order: tagged processes (fio, fio
servers, QEMU, mkfs, ... found by IOLAB_OWNER in their environment), QEMU by -name,
cgroups, scheduler claims (cgroups.queue_claims), mounts, loop devices (by backing file
name), and tagged files and dirs in the scratch dir and the temp dir.

Untagged `iolab-*` names (iolab before 0.2) say nothing about their owner: the sweep takes
them only inside this data dir's scratch dir (files, mounts, loop devices backed there, an
orphaned QEMU whose image is there, load generators in an untagged work dir there), and
only when no live ledger of this data dir names them; untagged cgroups never. It never
touches anything else: not outside the scratch dir and the temp dir, and no loop device,
mount, cgroup or process that does not carry iolab's names or tags.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from iolab.cgroups import cleanup as cgroup_cleanup
from iolab.cgroups import queue_claims
from iolab.core import owner as owners
from iolab.core import paths, resources
from iolab.core.cleaners import (
    attached_loops,
    detach_loop,
    is_mounted,
    kill_processes,
    kill_tagged,
)
from iolab.vm import cleanup as vm_cleanup

Step = Callable[[], tuple[list[str], list[str]]]


def clean_everything(sweep: bool = False) -> tuple[list[str], list[str]]:
    cleaned, errors = resources.clean_orphans()
    if sweep:
        c2, e2 = sweep_tagged()
        cleaned += c2
        errors += e2
    return cleaned, errors


def sweep_tagged() -> tuple[list[str], list[str]]:
    """Everything carrying a dead owner's tag, machine-wide; old untagged names in this scratch dir."""
    scratch = Path(os.path.realpath(paths.scratch_dir()))
    protected = _protected()
    steps: list[Step] = [
        lambda: (kill_tagged(lambda p: not p.owner.alive()), []),
        lambda: _legacy_generators(scratch, protected),
        lambda: vm_cleanup.sweep(scratch),
        cgroup_cleanup.sweep,
        queue_claims.sweep,  # while the devices are attached: a detach makes their records stale
        lambda: _mounts(scratch, protected),
        lambda: _loops(scratch, protected),
        lambda: _files(scratch, protected),
    ]
    cleaned: list[str] = []
    errors: list[str] = []
    for step in steps:
        try:
            c, e = step()
        except Exception as exc:  # one stuck step must not stop the others
            c, e = [], [f"{getattr(step, '__name__', 'sweep step')}: {exc}"]
        cleaned += c
        errors += e
    return cleaned, errors


def _removable(path: str, scratch: Path, protected: set[str]) -> bool:
    """A name iolab made whose owner is dead; untagged: only in this scratch dir, unprotected."""
    name = os.path.basename(path.rstrip("/"))
    if not name.startswith(owners.PREFIX):
        return False
    o = owners.owner_of_name(name)
    if o is not None:
        return not o.alive()
    return os.path.dirname(path) == str(scratch) and path not in protected


def _protected() -> set[str]:
    """What live ledgers of this data dir name (loop devices by backing file too)."""
    out: set[str] = set()
    for r in resources.live_items():
        out.add(r.ident)
        if r.info.get("backing"):
            out.add(str(r.info["backing"]))
        if r.info.get("workdir"):
            out.add(str(r.info["workdir"]))
    return out


def _legacy_generators(scratch: Path, protected: set[str]) -> tuple[list[str], list[str]]:
    """Load generators of iolab before 0.2 carry no tag and no cgroup: found by their untagged
    work dir (their working directory), the only trace they left."""
    killed = []
    for d in sorted(scratch.glob("iolab-work-*")) if scratch.is_dir() else []:
        if str(d) in protected or not _removable(str(d), scratch, protected):
            continue
        found = _working_in(str(d))
        if found:
            kill_processes(found)
            killed.append(f"processes {sorted(p.pid for p in found)} in {d}")
    return killed, []


def _working_in(workdir: str) -> list[owners.TaggedProcess]:
    """Live processes whose working directory is `workdir` (never this process)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            if os.readlink(f"/proc/{pid}/cwd") != workdir:
                continue
        except OSError:
            continue
        start = owners.start_time(pid)
        if start is not None:  # no owner known (iolab before 0.2): owner 0.0 stands for "unknown"
            found.append(owners.TaggedProcess(pid, start, owners.Owner(0, 0), None, ""))
    return found


def _mounts(scratch: Path, protected: set[str]) -> tuple[list[str], list[str]]:
    cleaned: list[str] = []
    errors: list[str] = []
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f]
    for mnt in sorted(points, reverse=True):
        mnt = mnt.replace("\\040", " ")
        if not (mnt.endswith(".mnt") and _removable(mnt, scratch, protected)):
            continue
        r = subprocess.run(["umount", mnt], capture_output=True, text=True)
        if r.returncode != 0:
            r = subprocess.run(["umount", "-l", mnt], capture_output=True, text=True)
        if r.returncode == 0:
            cleaned.append(f"mount {mnt}")
        else:
            errors.append(f"mount {mnt}: {r.stderr.strip()}")
    return cleaned, errors


def _loops(scratch: Path, protected: set[str]) -> tuple[list[str], list[str]]:
    cleaned, errors = [], []
    for dev, backing in attached_loops():
        if not _removable(backing, scratch, protected):
            continue
        try:
            detach_loop(dev)
            cleaned.append(f"loop {dev} ({backing})")
        except RuntimeError as exc:
            errors.append(f"loop {dev}: {exc}")
    return cleaned, errors


def _files(scratch: Path, protected: set[str]) -> tuple[list[str], list[str]]:
    cleaned, errors = [], []
    backing = {b for _, b in attached_loops()}
    places = [scratch, Path(tempfile.gettempdir())]
    for place in dict.fromkeys(places):
        for f in sorted(place.glob("iolab-*")) if place.is_dir() else []:
            if not _removable(str(f), scratch, protected) or str(f) in backing or is_mounted(str(f)):
                continue
            if place != scratch and owners.owner_of_name(f.name) is None:
                continue  # the temp dir is everybody's: only tagged names there
            try:
                if f.is_dir() and not f.is_symlink():
                    shutil.rmtree(f)
                    cleaned.append(f"dir {f}")
                else:
                    f.unlink()
                    cleaned.append(f"file {f}")
            except OSError as exc:
                errors.append(f"{f}: {exc}")
    return cleaned, errors

"""The generic kinds of resource every layer creates through the ledger: files, dirs, mounts
and loop devices; and the processes a dead owner started (the load generators the host
executor starts, `pgroup`, are its own kind: cgroups/executor.py). Each kind is one
`ResourceKind` below its functions: how an entry is undone, its order, and how `iolab clean
--all` finds one without a ledger.

Each cleaner is idempotent (undoing something already gone is not an error) and accepts a
*pending* entry, whose thing may or may not exist: a loop device is found by its backing
file, a process an executor started by its cgroup leaf (made before the process, in the
same pending window), a file or a mount by its path. Each sweep takes only what carries a
dead owner's tag, or an untagged old name in this data dir's scratch dir (SweepScope).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from iolab.core import children
from iolab.core import owner as owners
from iolab.core.resources import (
    ORDER_DEVICES,
    ORDER_FILES,
    ORDER_MOUNTS,
    Resource,
    ResourceKind,
    SweepScope,
    register_kind,
    register_owner_cleaner,
)


def _file(res: Resource) -> None:
    Path(res.ident).unlink(missing_ok=True)


def _dir(res: Resource) -> None:
    p = Path(res.ident)
    if not p.exists():
        return
    if res.info.get("recursive"):
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.rmdir()


def is_mounted(path: str) -> bool:
    real = os.path.realpath(path)
    with open("/proc/mounts") as f:
        return any(line.split()[1] == real for line in f)


def _mount(res: Resource) -> None:
    for attempt in range(10):
        if not is_mounted(res.ident):
            return
        r = children.run(["umount", res.ident], capture_output=True, text=True)
        if r.returncode == 0:
            return
        time.sleep(0.2 * (attempt + 1))
    children.run(["umount", "-l", res.ident], capture_output=True)


# ---------------------------------------------------------------- loop devices

def loop_backing_file(dev: str) -> str | None:
    """The file a loop device serves, None when detached (' (deleted)' stripped)."""
    name = os.path.basename(dev)
    p = Path(f"/sys/block/{name}/loop/backing_file")
    try:
        text = p.read_text().strip()
    except OSError:
        return None
    return text.removesuffix(" (deleted)") if text else None


def attached_loops() -> list[tuple[str, str]]:
    """(/dev/loopN, backing file) of every attached loop device, from sysfs."""
    out = []
    for d in sorted(Path("/sys/block").glob("loop*")):
        backing = loop_backing_file(d.name)
        if backing:
            out.append((f"/dev/{d.name}", backing))
    return out


def loops_backed_by(image: str) -> list[str]:
    """Loop devices serving `image` (how a pending loop entry finds what losetup made)."""
    return [dev for dev, back in attached_loops() if back == image]


DETACH_WAIT_S = 60.0  # a busy device detaches itself once released (autoclear); udev on a loaded
                     # machine may hold it for many seconds after a mount or mkfs


def detach_loop(dev: str) -> None:
    """losetup -d, and wait until the kernel really detached it (a busy device only gets autoclear);
    if it stays attached, the error names what holds it. A filesystem of the device that an iolab
    sandbox copied into its own mount namespace is unmounted there (`release_sandbox_copies`)."""
    r = children.run(["losetup", "-d", dev], capture_output=True, text=True)
    deadline = time.monotonic() + DETACH_WAIT_S
    attempt = 0
    while time.monotonic() < deadline:
        if loop_backing_file(dev) is None:
            return
        time.sleep(0.1)
        attempt += 1
        if attempt % 10 == 0:
            if attempt % 50 == 10:  # after 1 s, then every 5 s: a sandbox started meanwhile copies it too
                release_sandbox_copies(dev)
            r = children.run(["losetup", "-d", dev], capture_output=True, text=True)
    if loop_backing_file(dev) is None:
        return
    raise RuntimeError(f"{dev} is still attached after {DETACH_WAIT_S:.0f} s (busy: {holders_of(dev)}): "
                       f"{r.stderr.strip()}")


# ---------------------------------------------------------------- mounts copied into sandboxes

def _dev_number(dev: str) -> str | None:
    """'major:minor' of a block device, as /proc/PID/mountinfo writes it."""
    try:
        rdev = os.stat(dev).st_rdev
    except OSError:
        return None
    return f"{os.major(rdev)}:{os.minor(rdev)}"


class NamespaceCopy(NamedTuple):
    """A mount namespace other than ours in which a filesystem of a device is mounted."""

    pid: int  # a process in it
    points: list[str]  # the device's mount points there, deepest first
    ours: bool  # an iolab process lives in it (an iolab sandbox)
    building: bool  # every process in it is still bwrap: the sandbox is being built


SANDBOX_BUILDER = "bwrap"  # core/confine.py's sandbox; its comm until it execs the sandboxed command


def mount_namespaces_holding(dev: str) -> list[NamespaceCopy]:
    """Other mount namespaces in which a filesystem of `dev` is mounted.

    Why: a sandbox (bwrap `--ro-bind / /`, core/confine.py) starts with a private copy of every
    mount the host had at that instant, and the host's unmount does not reach the copy. A QEMU
    or fio sandboxed by one run while another run's filesystem image or loop-device filesystem
    was mounted kept that filesystem alive, invisibly, and its loop device could not be detached
    (seen in the parallel suite: "still attached after 60 s ... no mount, holder or process")."""
    number = _dev_number(dev)
    if number is None:
        return []
    try:
        mine = os.readlink("/proc/self/ns/mnt")
    except OSError:
        return []
    spaces: dict[str, tuple[int, list[str]]] = {}
    iolab_spaces: set[str] = set()
    running: set[str] = set()  # namespaces with a process that is not the sandbox's builder
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            ns = os.readlink(f"/proc/{entry}/ns/mnt")
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
        except OSError:
            continue
        if ns == mine:
            continue
        if comm != SANDBOX_BUILDER:
            running.add(ns)
        if owners.ENV_OWNER in owners.process_environ(int(entry)):
            iolab_spaces.add(ns)
        if ns in spaces:
            continue
        try:
            lines = Path(f"/proc/{entry}/mountinfo").read_text().splitlines()
        except OSError:
            continue
        points = [f.split()[4] for f in lines if len(f.split()) > 4 and f.split()[2] == number]
        spaces[ns] = (int(entry), sorted(points, key=lambda m: m.count("/"), reverse=True))
    return [NamespaceCopy(pid, points, ns in iolab_spaces, ns not in running)
            for ns, (pid, points) in spaces.items() if points]


def release_sandbox_copies(dev: str) -> list[str]:
    """Unmount `dev`'s filesystems from the mount namespaces of iolab's sandboxes (never from a
    namespace no iolab process lives in); what was unmounted, for messages. Lazily: a sandbox
    never uses another run's filesystem, but its processes' working directories could sit there.

    A sandbox still being built is left for a later call (detach_loop calls again every 5 s):
    bwrap makes each mount of its copy read-only one by one from the list it read, and a mount
    that vanished from under it fails that other run's sandbox ("Can't remount readonly")."""
    done = []
    for copy in mount_namespaces_holding(dev):
        if not copy.ours or copy.building:
            continue
        for point in copy.points:
            # its root (bwrap pivoted into a new one) and its pid namespace (umount reads the mount
            # table from /proc/self, and a sandbox's /proc is its own)
            r = children.run(["nsenter", "--target", str(copy.pid), "--mount", "--root", "--pid", "--",
                              "umount", "-l", point], capture_output=True, text=True)
            if r.returncode == 0:
                done.append(f"{point} in the sandbox of pid {copy.pid}")
    return done


def holders_of(dev: str) -> str:
    """What keeps a block device open: its mounts, the devices stacked on it, and processes with it open."""
    real = os.path.realpath(dev)
    found = []
    with open("/proc/mounts") as f:
        found += [f"mounted at {line.split()[1]}" for line in f if line.split()[0] == real]
    name = os.path.basename(real)
    try:
        found += [f"holder {h}" for h in os.listdir(f"/sys/block/{name}/holders")]
    except OSError:
        pass
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == real for fd in fds):
                with open(f"/proc/{pid}/comm") as c:
                    found.append(f"pid {pid} ({c.read().strip()})")
        except OSError:
            continue
    for copy in mount_namespaces_holding(dev):
        who = ("a process iolab did not start" if not copy.ours else
               "an iolab sandbox still being built" if copy.building else "an iolab sandbox")
        found.append(f"mounted at {', '.join(copy.points)} in the mount namespace of pid {copy.pid} ({who})")
    return ", ".join(found) or "no mount, holder or process seen (the kernel itself, e.g. a lazily unmounted fs)"


def _loop(res: Resource) -> None:
    """Detach only devices that still serve the image iolab attached (numbers get reused)."""
    backing = res.info.get("backing")
    devices: list[str] = []
    if res.ident:
        current = loop_backing_file(res.ident)
        if current is not None and (not backing or current == backing):
            devices.append(res.ident)
    if backing:
        devices += [d for d in loops_backed_by(str(backing)) if d not in devices]
    for dev in devices:
        detach_loop(dev)


# ---------------------------------------------------------------- processes

# Called with the pid of a dead owner's process just sent SIGKILL: a SIGKILLed process in a frozen
# cgroup does not die until the group is thawed, and an owner killed between freezing a trial
# cgroup and thawing it (cgroups/processes.py kills through the freezer) leaves it frozen. The
# cgroups package registers the thaw (it knows the hierarchies); core only calls it.
_THAWERS: list[Callable[[int], None]] = []


def register_thawer(fn: Callable[[int], None]) -> None:
    if fn not in _THAWERS:
        _THAWERS.append(fn)


def kill_processes(procs: Iterable[owners.TaggedProcess], wait_s: float = 15.0) -> list[str]:
    """SIGKILL each process that still is what was found (same pid, same start), thaw the dead
    owner's cgroup it may be frozen in, wait until gone."""
    procs = list(procs)
    killed = []
    for p in procs:
        if owners.start_time(p.pid) != p.start:
            continue
        try:
            os.kill(p.pid, signal.SIGKILL)
            killed.append(f"process {p.pid} ({os.path.basename(p.argv0) or '?'}, owner {p.owner.token})")
        except ProcessLookupError:
            continue
        if not p.owner.alive():
            for thaw in _THAWERS:
                thaw(p.pid)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(owners.is_alive(p.pid, p.start) for p in procs):
        time.sleep(0.05)
    return killed


def kill_tagged(match: Callable[[owners.TaggedProcess], bool]) -> list[str]:
    """Kill every process iolab started that `match` selects; repeated until none is left,
    since a dying fio may still fork a job process."""
    done: list[str] = []
    for _ in range(5):
        found = [p for p in owners.tagged_processes() if match(p)]
        if not found:
            break
        done += kill_processes(found)
    return done


def kill_processes_of(dead: owners.Owner) -> list[str]:
    """Owner cleaner: every process a dead owner started (fio, mkfs, qemu-img, QEMU, strace)."""
    return kill_tagged(lambda p: p.owner == dead)


# ---------------------------------------------------------------- sweeps (iolab clean --all)

def sweep_processes(scope: SweepScope) -> tuple[list[str], list[str]]:
    """Every process whose IOLAB_OWNER is dead (fio, fio servers, QEMU, mkfs, ...); then load
    generators of iolab before 0.2, which carry no tag and no cgroup: found by their untagged
    work dir (their working directory), the only trace they left."""
    killed = kill_tagged(lambda p: not p.owner.alive())
    for d in sorted(scope.scratch.glob("iolab-work-*")) if scope.scratch.is_dir() else []:
        if str(d) in scope.protected or not scope.removable(str(d)):
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


def _sweep_mounts(scope: SweepScope) -> tuple[list[str], list[str]]:
    cleaned: list[str] = []
    errors: list[str] = []
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f]
    for mnt in sorted(points, reverse=True):
        mnt = mnt.replace("\\040", " ")
        if not (mnt.endswith(".mnt") and scope.removable(mnt)):
            continue
        r = children.run(["umount", mnt], capture_output=True, text=True)
        if r.returncode != 0:
            r = children.run(["umount", "-l", mnt], capture_output=True, text=True)
        if r.returncode == 0:
            cleaned.append(f"mount {mnt}")
        else:
            errors.append(f"mount {mnt}: {r.stderr.strip()}")
    return cleaned, errors


def _sweep_loops(scope: SweepScope) -> tuple[list[str], list[str]]:
    cleaned, errors = [], []
    for dev, backing in attached_loops():
        if not scope.removable(backing):
            continue
        try:
            detach_loop(dev)
            cleaned.append(f"loop {dev} ({backing})")
        except RuntimeError as exc:
            errors.append(f"loop {dev}: {exc}")
    return cleaned, errors


def _sweep_files(scope: SweepScope) -> tuple[list[str], list[str]]:
    """Tagged files and dirs of dead owners in the scratch dir and the temp dir (untagged old
    names in the scratch dir only), never one that backs a loop device or is mounted."""
    cleaned, errors = [], []
    backing = {b for _, b in attached_loops()}
    places = [scope.scratch, Path(tempfile.gettempdir())]
    for place in dict.fromkeys(places):
        for f in sorted(place.glob("iolab-*")) if place.is_dir() else []:
            if not scope.removable(str(f)) or str(f) in backing or is_mounted(str(f)):
                continue
            if place != scope.scratch and owners.owner_of_name(f.name) is None:
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


register_kind(ResourceKind("mount", ORDER_MOUNTS, _mount, _sweep_mounts))
register_kind(ResourceKind("loop", ORDER_DEVICES, _loop, _sweep_loops))
register_kind(ResourceKind("file", ORDER_FILES, _file, _sweep_files))
register_kind(ResourceKind("dir", ORDER_FILES + 10, _dir))  # swept with the files
register_owner_cleaner(kill_processes_of)

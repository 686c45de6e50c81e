"""Target `fsimage`: a filesystem image file the user already has, mounted read-write through a
loop device; workloads make their files in a directory of iolab's own inside it.

For a study of a filesystem as it is (aged, full of the user's files, made with options iolab
would not choose) without a spare disk. The image holds the user's data, so it is guarded
like a device:

* **Identified by what it is.** The path is resolved (symlinks followed) and must be a regular
  file outside /proc, /sys and /dev (a block device belongs to the `device` target). Set-up
  opens it, checks the open file is the one validated (device and inode numbers) and attaches
  the loop device through that open file (/proc/self/fd), so a path swapped in between is
  never attached.
* **Never used twice at once.** Refused while a loop device serves it, a process has it open
  (a QEMU with it as a disk) or it is locked; while iolab uses it, iolab holds an exclusive
  open-file-description lock on the whole file (F_OFD_SETLK: the lock family QEMU's image
  locking uses), so a second iolab run or a QEMU cannot take it.
* **A filesystem this kernel mounts.** blkid must find one (a partition table is refused:
  name the partition's own image) of a type in /proc/filesystems; ext2/3/4 with errors
  recorded in its superblock is refused (check it first).
* **The user's files are never touched.** Workloads get `<mount>/iolab-<owner>-fsimage-<id>/`,
  made at set-up and removed with what is in it at teardown; the mount has nosuid, nodev and
  noexec (the kernel still parses the image: mount only images you trust).

Everything set-up makes is one ledger entry of this module's own resource kind, `fsimage`
(the mount point, the loop device, the mount, the workloads' directory), written before any
of it exists; its cleaner undoes whatever of it exists, a pending entry too, in the one safe
order: the directory, the mount, the loop device (only one that still serves this image), the
mount point. `iolab clean --all` finds a dead owner's leftovers by the tagged mount point: the
loop device is the mount's source, since its backing file (the user's image) carries no tag.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import shutil
import stat
import struct
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator

from iolab.cgroups.executor import HostExecutor
from iolab.core import children, owner, paths
from iolab.core.cleaners import attached_loops, detach_loop, is_mounted, loop_backing_file
from iolab.core.confine import Confinement
from iolab.core.errors import CapabilityMissing, RefusedError
from iolab.core.inputs import path_problem
from iolab.core.resources import ORDER_MOUNTS, Ledger, Resource, ResourceKind, SweepScope, register_kind
from iolab.core.units import format_size
from iolab.targets import blockinfo
from iolab.targets.base import MachineCheck, Placement, Target, TargetOffer, TargetParams, close_host
from iolab.targets.offer import HOST_CAPABILITIES

KIND = "fsimage"  # the target kind and its ledger entries' kind
LABEL = "fsimage"  # in the tagged names: iolab-o<pid>.<start>-fsimage-<id>.mnt
MOUNT_OPTIONS = "rw,nosuid,nodev,noexec"
NOT_IMAGES = ("/proc/", "/sys/", "/dev/")
EXT = ("ext2", "ext3", "ext4")
UMOUNT_TRIES = 10


class FsImageParams(TargetParams):
    kind: Literal["fsimage"] = "fsimage"
    image: str = Field(description="an existing image file holding a filesystem (ext4, xfs, btrfs, ...)")
    direct_io: bool = Field(True, description="the loop device does direct I/O on the image: the host's page "
                                              "cache does not absorb the workload's I/O")

    @field_validator("image", mode="before")
    @classmethod
    def _regular_file(cls, v: object) -> str:
        if not isinstance(v, str):
            raise ValueError(f"expected the path of an image file, got {v!r:.80}")
        problem = path_problem(v)
        if problem:
            raise ValueError(f"the path {problem}")
        real = os.path.realpath(v)
        if real.startswith(NOT_IMAGES):
            raise ValueError(f"{v!r} is {real}: an image file, not a /proc, /sys or /dev entry")
        try:
            st = os.stat(real)
        except OSError as exc:
            raise ValueError(f"{v!r}: {exc.strerror}") from None
        if stat.S_ISBLK(st.st_mode):
            raise ValueError(f"{v!r} is a block device: the `device` target uses one (guarded, --destroy-data)")
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{v!r} is not a regular file")
        probe(real)  # ValueError naming what is wrong with what it holds
        return real


# ---------------------------------------------------------------- what the image holds

@functools.lru_cache(maxsize=64)
def _probe(image: str, identity: tuple[int, int, int, int]) -> tuple[str, int | None, int | None]:
    """(filesystem type, free bytes, free inodes) of the image, read without mounting it."""
    r = children.run(["blkid", "-p", "-o", "export", image], capture_output=True, text=True)
    found = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    if found.get("PTTYPE"):
        raise ValueError(f"{image} holds a {found['PTTYPE']} partition table, not a filesystem: name an image of "
                         "one partition")
    fstype = found.get("TYPE")
    if not fstype or found.get("USAGE", "filesystem") != "filesystem":
        raise ValueError(f"{image} holds no filesystem blkid recognises ({fstype or r.stderr.strip() or 'nothing'})")
    if fstype not in _mountable():
        raise ValueError(f"{image} holds {fstype}, which this kernel does not mount (not in /proc/filesystems; "
                         f"modprobe {fstype}?)")
    if fstype not in EXT:
        return fstype, None, None
    return (fstype, *_ext_room(image))


def _ext_room(image: str) -> tuple[int | None, int | None]:
    """Free bytes and inodes from the superblock (dumpe2fs -h); refuses recorded errors."""
    r = children.run(["dumpe2fs", "-h", image], capture_output=True, text=True)
    sb = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in r.stdout.splitlines())}
    if "error" in sb.get("Filesystem state", ""):
        raise ValueError(f"{image}: its filesystem has errors recorded ({sb['Filesystem state']}): check it first "
                         f"(e2fsck -f {image})")
    try:
        return int(sb["Free blocks"]) * int(sb["Block size"]), int(sb["Free inodes"])
    except (KeyError, ValueError):
        return None, None


def _mountable() -> set[str]:
    with open("/proc/filesystems") as f:
        return {line.split()[-1] for line in f if line.strip() and not line.startswith("nodev")}


def probe(image: str) -> tuple[str, int | None, int | None]:
    st = os.stat(image)
    return _probe(image, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


# ---------------------------------------------------------------- the guard

def in_use(image: str, skip_pid: int | None = None) -> str | None:
    """Who uses the image now (a loop device serving it, a process with it open), or None."""
    st = os.stat(image)
    same = (st.st_dev, st.st_ino)
    for dev, backing in attached_loops():
        try:
            if _identity(backing) == same:
                return f"loop device {dev} serves it"
        except OSError:
            continue
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == skip_pid:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if _identity(f"/proc/{pid}/fd/{fd}") == same:
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    return f"process {pid} ({comm}) has it open"
            except OSError:
                continue
    return None


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def open_locked(image: str, checked: tuple[int, int] | None = None) -> int:
    """The image opened read-write, checked to be the regular file iolab checked before (its
    device and inode numbers `checked`, else the path's now) and locked whole (an exclusive
    open-file-description lock, released when iolab closes it or dies)."""
    fd = os.open(image, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (checked or _identity(image)):
            raise RefusedError(f"{image} changed since iolab checked it: it is not the file that was checked, "
                               "and iolab mounts only that one")
        try:  # struct flock: l_type, l_whence, l_start, l_len (0: to the end), l_pid (0 for OFD locks)
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise RefusedError(f"{image} is locked by another program (a QEMU using it as a disk, or another "
                                   "iolab run): iolab mounts an image only while nobody else uses it") from None
            raise
        user = in_use(image, skip_pid=os.getpid())
        if user:
            raise RefusedError(f"{image} is in use ({user}): iolab mounts an image only while nobody else uses it")
        return fd
    except BaseException:
        os.close(fd)
        raise


# ---------------------------------------------------------------- the resource kind

def _unmount(mnt: str) -> None:
    for attempt in range(UMOUNT_TRIES):
        if not is_mounted(mnt):
            return
        r = children.run(["umount", mnt], capture_output=True, text=True)
        if r.returncode == 0:
            return
        time.sleep(0.2 * (attempt + 1))
    if is_mounted(mnt):  # never lazily: the user's filesystem would stay in use, out of sight
        raise RuntimeError(f"{mnt} stays mounted: {r.stderr.strip()}")


def _undo(mnt: Path, workdir: str | None, devices: list[str]) -> None:
    """The one safe order: iolab's directory in the image, the mount, the loop devices, the mount point."""
    if is_mounted(str(mnt)):
        own = mnt / workdir if workdir and workdir.startswith(owner.PREFIX) and "/" not in workdir else None
        if own is not None and own.is_dir() and not own.is_symlink():
            shutil.rmtree(own)
        _unmount(str(mnt))
    for dev in devices:
        detach_loop(dev)
    try:
        mnt.rmdir()
    except FileNotFoundError:
        pass


def clean(res: Resource) -> None:
    """Kind `fsimage`, live or pending: whatever of mount point, loop device, mount and
    directory exists. A loop device is detached only while it still serves this image."""
    mnt = Path(res.ident)
    image = str(res.info.get("image") or "")
    identity = res.info.get("identity")
    same = (int(identity[0]), int(identity[1])) if isinstance(identity, list) and len(identity) == 2 else None
    serving = []
    for dev, backing in attached_loops():
        try:
            if backing == image or (same is not None and _identity(backing) == same):
                serving.append(dev)
        except OSError:
            continue
    recorded = res.info.get("device")
    if recorded:
        devices = [d for d in serving if d == recorded]
    else:  # pending: attached just before iolab died; only a device not mounted anywhere else
        devices = [d for d in serving if not _mounted_elsewhere(d, str(mnt))]
    _undo(mnt, res.info.get("workdir"), devices)


def _mounted_elsewhere(dev: str, mnt: str) -> bool:
    with open("/proc/mounts") as f:
        return any(line.split()[0] == dev and line.split()[1] != mnt for line in f)


def sweep(scope: SweepScope) -> tuple[list[str], list[str]]:
    """`iolab clean --all`: mounts `iolab-o…-fsimage-….mnt` of dead owners, with their loop device
    (the mount's source) and iolab's directory inside (the mount point's name, without .mnt)."""
    cleaned: list[str] = []
    errors: list[str] = []
    with open("/proc/mounts") as f:
        mounts = [(line.split()[0], line.split()[1].replace("\\040", " ")) for line in f]
    for source, mnt in mounts:
        name = os.path.basename(mnt)
        if not (name.endswith(".mnt") and f"-{LABEL}-" in name and scope.removable(mnt)):
            continue
        devices = [source] if source.startswith("/dev/loop") and loop_backing_file(source) else []
        try:
            _undo(Path(mnt), name.removesuffix(".mnt"), devices)
            cleaned.append(f"fsimage mount {mnt} ({', '.join(devices) or 'no loop device'})")
        except (OSError, RuntimeError) as exc:
            errors.append(f"fsimage mount {mnt}: {exc}")
    return cleaned, errors


# before the generic mounts: they would unmount the tagged mount point and leave the loop device
register_kind(ResourceKind(KIND, ORDER_MOUNTS - 5, clean, sweep))


# ---------------------------------------------------------------- the target

class FsImageTarget(Target):
    kind: ClassVar[str] = KIND
    Params: ClassVar[type[TargetParams]] = FsImageParams
    params: FsImageParams

    def __init__(self, params: TargetParams, ledger: Ledger):
        super().__init__(params, ledger)
        self.fd: int | None = None
        self.checked: tuple[int, int] | None = None  # the image's (device, inode) when preflight checked it
        self.made: Resource | None = None
        self.executor: HostExecutor | None = None

    @classmethod
    def offer(cls, params: TargetParams) -> TargetOffer:
        """A directory on the image's filesystem; its room from the superblock (ext2/3/4)."""
        assert isinstance(params, FsImageParams)
        fstype, free, inodes = probe(params.image)
        return TargetOffer(
            kind=cls.kind, settings=f"image = {params.image!r} ({fstype})", where="host",
            storage=frozenset({"directory"}), filesystem=fstype, capacity=free, inodes=inodes,
            capabilities=HOST_CAPABILITIES, writable=(str(paths.scratch_dir()),),
            remedies={"storage:block_device": "an fsimage target offers the filesystem in the image, not a raw device: "
                                              "use a `loop` or `device` target",
                      "capacity": "give it an image with more free space"})

    @classmethod
    def machine_checks(cls) -> list[MachineCheck]:
        missing = [t for t in ("blkid", "losetup", "mount", "umount") if shutil.which(t) is None]
        if missing:
            return [MachineCheck(KIND, "missing", f"install util-linux ({', '.join(missing)}): the fsimage target "
                                                  "mounts a filesystem image through a loop device")]
        extra = "" if shutil.which("dumpe2fs") else "; without dumpe2fs (e2fsprogs) an ext4 image's room is unknown"
        return [MachineCheck(KIND, "ok", f"blkid, losetup and mount for filesystem images{extra}")]

    def describe(self) -> list[str]:
        p = self.params
        fstype, _, _ = probe(p.image)
        return [f"mounts the {fstype} image {p.image} ({format_size(os.stat(p.image).st_size)}) read-write through a "
                f"loop device (direct-io={'on' if p.direct_io else 'off'}) under {paths.scratch_dir()}; refused while "
                "another program uses it, locked while iolab does",
                "workloads make their files in a directory of iolab's own in it, removed with everything in it at the "
                "end; nothing else in the image is touched",
                "each trial's processes can write only that directory and iolab's work dir (confined: core/confine.py)",
                "unmounts it and detaches the loop device at the end, also on failure or Ctrl-C"]

    def preflight(self) -> None:
        """Before anything exists: nobody uses the image; which file it is (set-up mounts that one only)."""
        user = in_use(self.params.image)
        if user:
            raise RefusedError(f"{self.params.image} is in use ({user}): iolab mounts an image only while nobody "
                               "else uses it")
        self.checked = _identity(self.params.image)

    def setup(self) -> Placement:
        return self.undone_on_failure(self._setup)

    def _setup(self) -> Placement:
        p = self.params
        self.fd = open_locked(p.image, self.checked)
        scratch = paths.scratch_dir()
        scratch.mkdir(parents=True, exist_ok=True)
        tag = owner.tag(LABEL, uuid.uuid4().hex[:8])
        mnt = scratch / f"{tag}.mnt"
        st = os.fstat(self.fd)
        with self.ledger.creating(KIND, str(mnt), image=p.image, identity=[st.st_dev, st.st_ino],
                                  workdir=tag) as res:
            self.made = res
            mnt.mkdir()
            dev = _attach(self.fd, p.direct_io)
            self.ledger.update(res, device=dev)
            r = children.run(["mount", "-o", MOUNT_OPTIONS, dev, str(mnt)], capture_output=True, text=True)
            if r.returncode != 0:
                raise CapabilityMissing(f"could not mount {p.image} ({dev}): {r.stderr.strip()}")
            (mnt / tag).mkdir(mode=0o700)
        # trial processes can write only iolab's own directory in the image (core/confine.py):
        # the user's files beside it stay read-only whatever name a job reaches them by
        confinement = Confinement(writable=(str(mnt / tag),))
        self.executor = HostExecutor(scratch, self.ledger, confinement=confinement)
        name = os.path.basename(dev)
        manifest: dict[str, Any] = {
            "target": KIND, "image": p.image, "image_bytes": st.st_size, "filesystem": probe(p.image)[0],
            "loop_device": dev, "direct_io": Path(f"/sys/block/{name}/loop/dio").read_text().strip() == "1",
            "mount_options": MOUNT_OPTIONS, "queue": blockinfo.queue_settings(name),
            "backing_device": blockinfo.device_of_path(p.image), "confinement": confinement.manifest()}
        return Placement(executor=self.executor, directory=str(mnt / tag), host_device=name, manifest=manifest)

    def teardown(self) -> None:
        close_host(self.executor, self.ledger, self.made)
        self.executor = self.made = None
        if self.fd is not None:
            os.close(self.fd)  # the lock goes with it
            self.fd = None


def _attach(fd: int, direct_io: bool) -> str:
    """losetup on the open, locked file itself (/proc/self/fd/N in losetup is the same file)."""
    argv = ["losetup", "--find", "--show", f"--direct-io={'on' if direct_io else 'off'}", f"/proc/self/fd/{fd}"]
    r = children.run(argv, capture_output=True, text=True, pass_fds=(fd,))
    if r.returncode != 0:
        raise CapabilityMissing(f"could not attach a loop device to the image: {r.stderr.strip()}")
    return r.stdout.strip()

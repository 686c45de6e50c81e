"""The data-safety guard: which block device a path really names, and whether it holds data.

One guard for every place a user names a device: the `device` target, the `cgroups`
target's `device`, and a block device an imported fio job file writes to. A device is
identified by its device number (`st_rdev`, through /sys/dev/block/MAJ:MIN), never by
the last component of a path: a regular file called `sda`, a path under /sys or /proc,
or a symlink to a disk all resolve to what they really are (or are refused).

A device holds data when it has partitions, a filesystem / RAID / LVM / partition-table
signature (blkid), a mount, a holder (device-mapper, md) or is swap; a partition also
holds data when another partition of its disk does. Such a device is refused unless the
user names it in `--destroy-data DEVICE` (any path to the same device).
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from iolab.core import children
from iolab.core.errors import RefusedError

SYS_DEV_BLOCK = Path("/sys/dev/block")
MAX_PATH = 4096

# Device numbers the user allowed to be overwritten (--destroy-data).
_DESTROY_ALLOWED: set[tuple[int, int]] = set()


@dataclass(frozen=True)
class BlockNode:
    """A block device as the kernel knows it."""

    path: str                 # /dev/NAME when that node is this device, else the real path given
    name: str                 # the kernel's name (sda, sda1, loop3, dm-0)
    rdev: tuple[int, int]
    sysfs: Path               # /sys/devices/.../NAME
    parent: str | None        # the whole disk's name when this is a partition


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a device"


def block_device(value: object) -> BlockNode:
    """The block device `value` names (symlinks followed, identified by device number).

    Raises ValueError saying what `value` is instead (missing, a regular file, a directory...).
    """
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a device path, got {value!r}")
    if "\0" in value or len(value) > MAX_PATH or any(ord(c) < 0x20 for c in value):
        raise ValueError("is not a usable path (control characters or longer than 4096)")
    try:
        st = os.stat(value)
    except FileNotFoundError:
        raise ValueError("does not exist") from None
    except OSError as exc:
        raise ValueError(f"cannot be examined ({exc.strerror})") from None
    if not stat.S_ISBLK(st.st_mode):
        raise ValueError(f"is not a block device: it is {_kind(st.st_mode)}")
    rdev = (os.major(st.st_rdev), os.minor(st.st_rdev))
    link = SYS_DEV_BLOCK / f"{rdev[0]}:{rdev[1]}"
    if not link.exists():
        raise ValueError(f"is a device node for {rdev[0]}:{rdev[1]}, which the kernel does not know")
    real = link.resolve()
    devname = _uevent(real).get("DEVNAME", real.name)
    path = f"/dev/{devname}"
    try:
        same = os.stat(path).st_rdev == st.st_rdev
    except OSError:
        same = False
    parent = real.parent.name if (real / "partition").exists() else None
    return BlockNode(path if same else os.path.realpath(value), real.name, rdev, real, parent)


def check_free(value: str) -> BlockNode:
    """RefusedError when `value` is not a block device, or holds data and was not allowed."""
    try:
        node = block_device(value)
    except ValueError as exc:
        raise RefusedError(f"refusing to use {value}: it {exc}") from None
    signs = data_signs(node)
    if signs and node.rdev not in _DESTROY_ALLOWED:
        raise RefusedError(
            f"refusing to use {value}: it {'; it '.join(signs)}. Its data would be destroyed. "
            f"If that is really what you want, pass --destroy-data {value}")
    return node


def allow_destroy(values: Iterable[str]) -> None:
    """--destroy-data: each value must name a block device (allowed by its number). A file is
    never needed: iolab writes a host directory's files only in a directory it makes there."""
    for v in values:
        try:
            _DESTROY_ALLOWED.add(block_device(v).rdev)
        except ValueError as exc:
            raise RefusedError(f"--destroy-data {v}: it {exc}") from None


def destroy_allowed(path: str) -> bool:
    """Did the user name this block device (any path to it) with --destroy-data?"""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISBLK(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) in _DESTROY_ALLOWED


def check_named(value: str) -> BlockNode:
    """check_free, and the device must also have been named with --destroy-data: a spec or job
    file alone never points iolab at a disk it did not make (docs/threat-model.md)."""
    node = check_free(value)
    if node.rdev not in _DESTROY_ALLOWED:
        raise RefusedError(f"refusing to use {value}: iolab writes a block device it did not make only when you "
                           f"name it on the command line. If {node.path} may be overwritten, pass "
                           f"--destroy-data {value}")
    return node


def data_signs(node: BlockNode) -> list[str]:
    """Reasons to believe the device holds data (empty: iolab may overwrite it)."""
    parts = _partitions(node.sysfs)
    signs = [f"has partitions: {', '.join(sorted(p.name for p in parts))}"] if parts else []
    signs += _usage_signs([node.sysfs, *parts])
    signs += _blkid_signs(node.path)
    if node.parent:
        disk = node.sysfs.parent
        for other in [disk, *(p for p in _partitions(disk) if p.name != node.name)]:
            found = _usage_signs([other]) + (_blkid_signs(f"/dev/{other.name}", table=False)
                                             if other != disk else [])
            signs += [f"is a partition of {disk.name}, whose {other.name} {s}" for s in found]
    return signs


def _partitions(sysfs: Path) -> list[Path]:
    try:
        return sorted(p for p in sysfs.iterdir() if (p / "partition").exists())
    except OSError:
        return []


def _usage_signs(devices: list[Path]) -> list[str]:
    """Mounts, holders and swap use of these sysfs devices."""
    numbers = {_dev_number(d): d.name for d in devices}
    signs = []
    for d in devices:
        holders = sorted(h.name for h in (d / "holders").iterdir()) if (d / "holders").is_dir() else []
        if holders:
            signs.append(f"is in use by {', '.join(holders)}" + ("" if d == devices[0] else f" (through {d.name})"))
    for majmin, source, mountpoint in _mounts():
        if majmin in numbers or _rdev_of(source) in numbers:
            signs.append(f"is mounted at {mountpoint}")
    for swap in _swaps():
        if _rdev_of(swap) in numbers:
            signs.append(f"is used as swap ({swap})")
    return signs


def _blkid_signs(path: str, table: bool = True) -> list[str]:
    try:
        probe = children.run(["blkid", "-p", "-o", "export", path], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"could not be probed for signatures ({exc})"]
    if probe.returncode not in (0, 2):
        return [f"could not be probed for signatures (blkid exit {probe.returncode}: {probe.stderr.strip()})"]
    fields = dict(line.split("=", 1) for line in probe.stdout.splitlines() if "=" in line)
    signs = []
    if fields.get("TYPE"):
        signs.append(f"holds a {fields['TYPE']} signature")
    if table and fields.get("PTTYPE"):
        signs.append(f"holds a {fields['PTTYPE']} partition table")
    return signs


def _uevent(sysfs: Path) -> dict[str, str]:
    try:
        return dict(line.split("=", 1) for line in (sysfs / "uevent").read_text().splitlines() if "=" in line)
    except OSError:
        return {}


def _dev_number(sysfs: Path) -> tuple[int, int] | None:
    try:
        major, minor = (sysfs / "dev").read_text().strip().split(":")
        return int(major), int(minor)
    except (OSError, ValueError):
        return None


def _rdev_of(path: str) -> tuple[int, int] | None:
    if not path.startswith("/"):
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISBLK(st.st_mode) else None


def _mounts() -> list[tuple[tuple[int, int] | None, str, str]]:
    """(device number, source, mount point) of every mount (/proc/self/mountinfo)."""
    out: list[tuple[tuple[int, int] | None, str, str]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        try:
            major, minor = (int(x) for x in fields[2].split(":"))
        except ValueError:
            continue
        out.append(((major, minor), _unescape(after[1]) if len(after) > 1 else "", _unescape(fields[4])))
    return out


def _swaps() -> list[str]:
    try:
        lines = Path("/proc/swaps").read_text().splitlines()[1:]
    except OSError:
        return []
    return [_unescape(line.split()[0]) for line in lines if line.split()]


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) + 1 and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)

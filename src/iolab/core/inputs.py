"""Files and places a user names on the command line: read with a bound, written only where possible.

`read_user_file` never blocks and never reads without bound: a directory, a FIFO,
/dev/zero, /dev/stdin (a pipe or a terminal) or a file over the size cap is refused
before a byte is read. `check_writable` says whether a file could be written at a path
without creating anything, so `--dry-run`, `--db` and `-o` are checked before a run
starts: a directory, a device, a place under /proc or /sys, a read-only filesystem or a
directory without write permission is an input error (exit status 2), never a traceback
after an hour of trials.
"""

from __future__ import annotations

import errno
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from iolab.core.errors import InputError, SpecError

MAX_INPUT_BYTES = 1 << 20  # a spec or job file larger than 1 MiB is not a spec or job file
MAX_PATH = 4096
MAX_COMPONENT = 255
# filesystems that hold no user files: writing a database or a report there is a mistake
PSEUDO_FS = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "devtmpfs", "securityfs", "debugfs", "tracefs",
             "bpf", "configfs", "pstore", "efivarfs", "fusectl", "mqueue", "binfmt_misc", "autofs", "rpc_pipefs",
             "nsfs", "hugetlbfs"}


def path_problem(text: str) -> str | None:
    """What makes a string unusable as a path (NUL, control characters, length), or None."""
    if "\0" in text:
        return "contains a NUL byte"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        return "contains control characters"
    if len(os.fsencode(text)) > MAX_PATH:
        return f"is longer than {MAX_PATH} bytes"
    if any(len(os.fsencode(part)) > MAX_COMPONENT for part in text.split("/")):
        return f"has a component longer than {MAX_COMPONENT} bytes"
    return None


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


def read_user_file(path: Path, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; InputError naming the file otherwise."""
    problem = path_problem(str(path))
    if problem:
        raise InputError(f"{path!s:.200}: the path {problem}")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: is {_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise InputError(f"{path}: is {st.st_size} bytes; iolab reads spec and job files up to {limit >> 10} KiB")
    try:
        # O_NONBLOCK: if the file was swapped for a FIFO since stat(), open() must not hang
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(f"{path}: is not a regular file")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise InputError(f"{path}: is larger than {limit >> 10} KiB")
    return data


def check_writable(path: Path, what: str) -> None:
    """InputError unless a regular file could be written at `path`. Creates nothing."""
    problem = path_problem(str(path))
    if problem:
        raise InputError(f"{what} {str(path)[:200]!r}: the path {problem}")
    target = Path(os.path.abspath(path))
    try:
        if os.path.lexists(target):
            real = Path(os.path.realpath(target))
            st = os.stat(real)
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{what} {path}: is {_kind(st.st_mode)}; iolab writes only regular files")
            _check_place(real, real.parent, what, path, need=os.W_OK)
            return
        ancestor = target.parent
        while not os.path.lexists(ancestor):
            ancestor = ancestor.parent
        real = Path(os.path.realpath(ancestor))
        if not real.is_dir():
            raise InputError(f"{what} {path}: {ancestor} is not a directory")
        _check_place(real, real, what, path, need=os.W_OK | os.X_OK)
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot be used ({exc.strerror})") from None


def _check_place(obj: Path, directory: Path, what: str, given: Path, need: int) -> None:
    fstype, mountpoint, options = _mount_of(directory)
    if fstype in PSEUDO_FS:
        raise InputError(f"{what} {given}: {mountpoint} is a {fstype} filesystem, where iolab writes nothing")
    if "ro" in options.split(",") or os.statvfs(directory).f_flag & os.ST_RDONLY:
        raise InputError(f"{what} {given}: {mountpoint} is mounted read-only")
    if not os.access(obj, need, effective_ids=os.access in os.supports_effective_ids):
        raise InputError(f"{what} {given}: {os.strerror(errno.EACCES).lower()} ({obj})")


# Directories that are the system's, never a place for a study's files (a host target's
# `directory`): SYSTEM_TREES and anything under them, SYSTEM_DIRS themselves (a directory
# under /home or /var/tmp is fine; a data disk mounted on /mnt or /srv is too).
SYSTEM_TREES = ("/etc", "/usr", "/boot", "/proc", "/sys", "/dev", "/run")
SYSTEM_DIRS = ("/", "/var", "/var/lib", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/root", "/home",
               "/tmp", "/var/tmp")


def system_directory_problem(directory: str) -> str | None:
    """Why a directory (resolved: symlinks followed) is the system's and not a place for a
    study's files, or None: SYSTEM_DIRS, anything in SYSTEM_TREES, any directory on a pseudo
    filesystem (also /proc's and /sys's look-alikes mounted elsewhere), and an empty string."""
    if directory == "":
        return "is empty (leave `directory` out for a scratch directory iolab makes and removes)"
    real = os.path.realpath(directory)
    shown = directory if real == directory else f"{directory} (that is {real})"
    if real in SYSTEM_DIRS or real in SYSTEM_TREES:
        return f"{shown} is a system directory: name a directory of your own (e.g. a new one under it)"
    for tree in SYSTEM_TREES:
        if real.startswith(tree + "/"):
            return f"{shown} is inside {tree}, which belongs to the system"
    fstype, mountpoint, _options = _mount_of(Path(real))
    if fstype in PSEUDO_FS:
        return f"{shown} is on {mountpoint}, a {fstype} filesystem, which holds no files of yours"
    return None


def _mount_of(path: Path) -> tuple[str, str, str]:
    """(fstype, mount point, mount options) of the mount holding `path` (/proc/self/mountinfo)."""
    best = ("", "/", "")
    real = str(path)
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 6:
            continue
        mnt = fields[4].replace("\\040", " ")
        fstype = line.split(" - ", 1)[1].split()[0]
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[1]):
            best = (fstype, mnt, fields[5])
    return best


def read_user_text(path: Path) -> str:
    """The UTF-8 text of a user's input file; every problem a SpecError naming the file (exit 2)."""
    source = str(path)
    try:
        data = read_user_file(path)
    except InputError as exc:
        raise SpecError(source, [("(file)", str(exc).removeprefix(f"{path}: "))]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise SpecError(source, [(f"(line {line})", "not UTF-8 text")]) from None


def parse_user_toml(text: str, source: str) -> dict[str, Any]:
    """A user's TOML document; a syntax error is a SpecError naming the file (exit 2)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(source, [("(syntax)", str(exc))]) from None
    except RecursionError:
        raise SpecError(source, [("(syntax)", "nested too deeply")]) from None

"""cgroupfs file operations shared by both hierarchies.

Writes go through one function so a kernel refusal (EINVAL, ERANGE, ENODEV) becomes an
error naming the file and value; removal evacuates tasks first and retries on EBUSY
because a task that just exited can pin a cgroup for a few milliseconds.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

PROCS = "cgroup.procs"


class CgroupWriteError(OSError):
    """The kernel refused a value written to a cgroup file."""


def write_value(path: Path, value: str) -> None:
    """Write one value in a single write(2), as the kernel parses one write at a time."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC if _is_fake(path) else os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise CgroupWriteError(exc.errno, f"writing {value!r} to {path}: {exc.strerror}") from exc


def _is_fake(path: Path) -> bool:
    """Regular files outside /sys and /proc are a test's fake cgroupfs: allow creating them."""
    return not str(path).startswith(("/sys/", "/proc/"))


def read_value(path: Path) -> str:
    return path.read_text().strip()


def pids(group: Path) -> list[int]:
    """Processes in a group (not its descendants)."""
    try:
        text = (group / PROCS).read_text()
    except FileNotFoundError:
        return []
    return [int(x) for x in text.split()]


def evacuate(group: Path, dest: Path, kill: bool = False) -> None:
    """Move every task out of `group` (and its descendants) into `dest`, or kill them."""
    for sub in _depth_first(group):
        for pid in pids(sub):
            try:
                if kill:
                    os.kill(pid, 9)
                else:
                    write_value(dest / PROCS, str(pid))
            except (ProcessLookupError, CgroupWriteError):
                pass  # the task exited meanwhile


def remove_tree(group: Path, dest: Path | None = None, kill: bool = False,
                timeout_s: float = 3.0) -> None:
    """Remove `group` and its descendants; tasks go to `dest` (default: the group's parent's parent)."""
    if not group.is_dir():
        return
    dest = dest or group.parent
    evacuate(group, dest, kill=kill)
    for sub in _depth_first(group):
        rmdir_retry(sub, timeout_s)


def rmdir_retry(path: Path, timeout_s: float = 3.0) -> None:
    """rmdir, retrying while the kernel says EBUSY (a task still leaving)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno == errno.ENOTEMPTY and _is_fake(path):
                _clear_fake(path)
                continue
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def _clear_fake(path: Path) -> None:
    """A fake cgroupfs holds real files; delete them so rmdir can succeed."""
    for f in path.iterdir():
        if f.is_file():
            f.unlink()


def _depth_first(group: Path) -> list[Path]:
    """Descendants before ancestors, so rmdir can go in list order."""
    out: list[Path] = []
    for root, _dirs, _files in os.walk(group, topdown=False):
        out.append(Path(root))
    return out

"""Cleaners for the generic kinds of resource: files, directories, mounts, loop devices.

Each cleaner is idempotent: undoing something already gone is not an error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from iolab.core.resources import Resource, register_cleaner


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
        r = subprocess.run(["umount", res.ident], capture_output=True, text=True)
        if r.returncode == 0:
            return
        time.sleep(0.2 * (attempt + 1))
    subprocess.run(["umount", "-l", res.ident], capture_output=True)


def loop_backing_file(dev: str) -> str | None:
    name = os.path.basename(dev)
    p = Path(f"/sys/block/{name}/loop/backing_file")
    return p.read_text().strip() if p.exists() else None


def _loop(res: Resource) -> None:
    """Detach only if the device still serves the image iolab attached (numbers get reused)."""
    backing = loop_backing_file(res.ident)
    if backing is None or (res.info.get("backing") and backing != res.info["backing"]):
        return
    r = subprocess.run(["losetup", "-d", res.ident], capture_output=True, text=True)
    # losetup -d on a busy device only schedules the detach: wait until it really happened
    for attempt in range(200):
        if loop_backing_file(res.ident) is None:
            return
        time.sleep(0.1)
        if attempt % 10 == 9:
            r = subprocess.run(["losetup", "-d", res.ident], capture_output=True, text=True)
    raise RuntimeError(f"{res.ident} is still attached (busy?): {r.stderr.strip()}")


def _pgroup(res: Resource) -> None:
    """Kill a load generator and its job processes, unless the pid now belongs to someone else."""
    from iolab.core.exec import kill_generator

    pgid = int(res.ident)
    try:
        start = open(f"/proc/{pgid}/stat").read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        start = None
    if start is not None and res.info.get("start") and start != res.info["start"]:
        kill_generator(-1, res.info.get("workdir"))  # leader reused: only orphans in the work dir
        return
    kill_generator(pgid, res.info.get("workdir"))


register_cleaner("file", _file)
register_cleaner("dir", _dir)
register_cleaner("mount", _mount)
register_cleaner("loop", _loop)
register_cleaner("pgroup", _pgroup)

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
    for attempt in range(10):
        r = subprocess.run(["losetup", "-d", res.ident], capture_output=True, text=True)
        if r.returncode == 0 or loop_backing_file(res.ident) is None:
            return
        time.sleep(0.2 * (attempt + 1))
    raise RuntimeError(f"losetup -d {res.ident} failed: {r.stderr.strip()}")


register_cleaner("file", _file)
register_cleaner("dir", _dir)
register_cleaner("mount", _mount)
register_cleaner("loop", _loop)

"""`iolab clean`: undo what crashed or killed iolab processes left behind.

First from the ledgers of dead processes (exact), then, with sweep, by tag: iolab names
everything it creates with an 'iolab-' prefix.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from iolab.core import paths, resources
from iolab.core.cleaners import is_mounted


def clean_everything(sweep: bool = False) -> tuple[list[str], list[str]]:
    cleaned, errors = resources.clean_orphans()
    if sweep:
        c2, e2 = sweep_tagged()
        cleaned += c2
        errors += e2
    return cleaned, errors


def sweep_tagged() -> tuple[list[str], list[str]]:
    cleaned: list[str] = []
    errors: list[str] = []
    scratch = paths.scratch_dir()
    for mnt in sorted(scratch.glob("iolab-*.mnt")) if scratch.exists() else []:
        if is_mounted(str(mnt)):
            r = subprocess.run(["umount", str(mnt)], capture_output=True, text=True)
            (cleaned if r.returncode == 0 else errors).append(f"mount {mnt}")
    for line in subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True,
                               text=True).stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and Path(parts[1].strip()).name.startswith("iolab-"):
            r = subprocess.run(["losetup", "-d", parts[0]], capture_output=True, text=True)
            (cleaned if r.returncode == 0 else errors).append(f"loop {parts[0]} ({parts[1].strip()})")
    for sweeper in _package_sweepers():
        c, e = sweeper()
        cleaned += c
        errors += e
    for f in sorted(scratch.glob("iolab-*")) if scratch.exists() else []:
        try:
            if f.is_dir():
                if not is_mounted(str(f)):
                    import shutil

                    shutil.rmtree(f)
                    cleaned.append(f"dir {f}")
            else:
                f.unlink()
                cleaned.append(f"file {f}")
        except OSError as exc:
            errors.append(f"{f}: {exc}")
    return cleaned, errors


def _package_sweepers() -> list:
    out = []
    for mod, fn in (("iolab.cgroups.cleanup", "sweep"), ("iolab.vm.cleanup", "sweep")):
        try:
            m = __import__(mod, fromlist=[fn])
            out.append(getattr(m, fn))
        except (ImportError, AttributeError):
            continue
    return out

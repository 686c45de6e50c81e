"""The cleaner for kind "process": QEMU processes started by the VM lab.

Images and run directories use the core "file" and "dir" kinds (iolab.core.cleaners).
Imported by iolab.core.resources._load_all_cleaners, so `iolab clean` after a crash kills
a leftover QEMU by pid, but only after checking its command line still carries iolab's
tag: a recycled pid belonging to something else is never touched.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import iolab.core.cleaners  # noqa: F401  (file/dir/mount/loop cleaners the VM target relies on)
from iolab.core.resources import Resource, register_cleaner


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def is_iolab_qemu(pid: int, tag: str | None = None) -> bool:
    """True if pid runs QEMU named with an iolab tag (and the given tag, if any)."""
    argv = _cmdline(pid)
    if not argv or "qemu" not in Path(argv[0]).name:
        return False
    try:
        name = argv[argv.index("-name") + 1]
    except (ValueError, IndexError):
        return False
    return name.startswith("iolab") and (tag is None or name == tag)


def kill_qemu(pid: int, tag: str | None = None, grace_s: float = 2.0) -> bool:
    """SIGTERM, then SIGKILL after grace_s; returns False if pid was not an iolab QEMU."""
    if not is_iolab_qemu(pid, tag):
        return False
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not is_iolab_qemu(pid, tag):  # gone (or a zombie whose cmdline is empty)
                return True
            time.sleep(0.05)
    return True


def clean_process(res: Resource) -> None:
    """Cleaner for kind "process": the ident is the pid; info["tag"] the -name value."""
    if not res.ident.isdigit():
        raise ValueError(f"process ident must be a pid, got {res.ident!r}")
    tag = res.info.get("tag")
    kill_qemu(int(res.ident), tag if isinstance(tag, str) else None)


def leftover_qemu_pids() -> list[int]:
    """Every running QEMU carrying an iolab tag (for `iolab clean` and tests)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and is_iolab_qemu(int(d.name)):
            pids.append(int(d.name))
    return pids


register_cleaner("process", clean_process)

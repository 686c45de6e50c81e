"""The cleaner for kind "process": QEMU processes started by the VM lab.

Images and run directories use the core "file" and "dir" kinds (iolab.core.cleaners).
Registered as a resource kind (vm/lifecycle.py, which starts QEMU, imports it), so `iolab
clean` after a crash kills a leftover QEMU by pid, but only after checking its command line
still carries iolab's tag: a recycled pid belonging to something else is never touched. `sweep()` (for
`iolab clean --all`) kills QEMU processes whose owner, named in the tag, is dead.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import iolab.core.cleaners  # noqa: F401  (file/dir/mount/loop cleaners the VM target relies on)
from iolab.core import owner as owners
from iolab.core.resources import ORDER_PROCESSES, Resource, ResourceKind, register_kind


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
    """Cleaner for kind "process": the ident is the pid; info["tag"] the -name value.

    A pending entry (no pid yet: iolab died around the Popen) finds its QEMU by the tag."""
    tag = res.info.get("tag")
    tag = tag if isinstance(tag, str) and tag else None
    if res.ident.isdigit():
        kill_qemu(int(res.ident), tag)
    elif res.ident:
        raise ValueError(f"process ident must be a pid, got {res.ident!r}")
    if tag is not None:
        for pid in leftover_qemu_pids():
            kill_qemu(pid, tag)


def leftover_qemu_pids() -> list[int]:
    """Every running QEMU carrying an iolab tag (for `iolab clean` and tests)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and is_iolab_qemu(int(d.name)):
            pids.append(int(d.name))
    return pids


def sweep(scratch: Path | None = None) -> tuple[list[str], list[str]]:
    """`iolab clean --all`: QEMU processes whose owner is dead, whatever data dir it used.

    The owner is read from the -name tag (core.owner). A QEMU named `iolab-...` without an
    owner tag (iolab before 0.2) is killed only when it is orphaned (a live old iolab is
    still its parent) and its disk image lies in `scratch`, this data dir's scratch dir."""
    killed: list[str] = []
    for pid in leftover_qemu_pids():
        name = qemu_name(pid)
        if name is None:
            continue
        o = owners.owner_of_name(name)
        if o is not None:
            if o.alive():
                continue
        elif scratch is None or not _orphaned(pid) or not any(f"{scratch}/" in a for a in _cmdline(pid)):
            continue
        if kill_qemu(pid, name):
            killed.append(f"qemu {pid} ({name})")
    return killed, []


def qemu_name(pid: int) -> str | None:
    argv = _cmdline(pid)
    try:
        return argv[argv.index("-name") + 1]
    except (ValueError, IndexError):
        return None


def _orphaned(pid: int) -> bool:
    """Reparented to init: the process that started it is gone."""
    fields = owners.proc_stat(pid)
    return fields is not None and len(fields) > 1 and int(fields[1]) == 1


register_kind(ResourceKind("process", ORDER_PROCESSES + 10, clean_process, lambda scope: sweep(scope.scratch)))

"""`iolab doctor`: what this machine can do, checked, not assumed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from iolab.core import paths
from iolab.runner.manifest import cgroup_mode, environment


def _check(name: str, state: str, detail: str) -> dict[str, str]:
    return {"name": name, "state": state, "detail": detail}


def checks() -> dict[str, Any]:
    env = environment()
    items = [
        _check("root", "ok" if os.geteuid() == 0 else "warn",
               "running as root" if os.geteuid() == 0 else "not root: loop devices, cgroups and schedulers need root"),
        _check("fio", "ok" if env["fio_version"] else "missing", env["fio_version"] or "install fio"),
        _check("qemu", "ok" if env["qemu_version"] else "missing",
               env["qemu_version"] or "install qemu-system-x86 and qemu-utils for the VM studies"),
        _accel_check(),
        _check("cgroups", "ok", _cgroup_detail()),
        _check("schedulers", "ok", _schedulers()),
        _check("loop", "ok" if Path("/dev/loop-control").exists() else "missing",
               "loop devices available" if Path("/dev/loop-control").exists() else "no /dev/loop-control"),
        _space_check(),
        _check("compiler", "ok" if shutil.which("cc") or shutil.which("gcc") else "missing",
               "cc builds iolab's native helpers" if shutil.which("cc") else "install gcc"),
        *[_tool_check(tool, use) for tool, use in TOOLS.items()],
    ]
    return {"environment": env, "checks": items}


# Programs some studies need besides fio and QEMU: name -> what needs it.
TOOLS: dict[str, str] = {
    "sysbench": "vm-profile (CPU) and the memory cross-check",
    "iperf3": "vm-profile (network)", "strace": "sync-amplification's host syscall counts",
    "db_bench": "cgroup-weights' database tenant", "chromium": "checking HTML reports in the tests",
}


def _tool_check(tool: str, use: str) -> dict[str, str]:
    found = shutil.which(tool)
    return _check(tool, "ok" if found else "missing", f"{found} ({use})" if found else f"install {tool}: {use}")


def _accel_check() -> dict[str, str]:
    try:
        from iolab.vm.qemu import detect_accel
    except ImportError:
        return _check("accel", "warn", "VM support not available in this build")
    try:
        info = detect_accel()
    except Exception as exc:  # doctor reports, never crashes
        return _check("accel", "warn", f"could not probe: {exc}")
    if info.accel == "kvm":
        return _check("accel", "ok", f"KVM works ({info.reason})")
    return _check("accel", "warn", f"guests run under TCG software emulation: {info.reason} "
                                   "(speed ratios not representative)")


def _cgroup_detail() -> str:
    mode = cgroup_mode()
    parts = [f"mode {mode}"]
    try:
        from iolab.cgroups.detect import describe

        ok = [name for name, state in describe()["backends"].items() if state == "ok"]
        parts.append(f"I/O control backends usable: {', '.join(ok) or 'none'}")
    except Exception as exc:  # doctor reports, never crashes
        parts.append(f"backend detection failed: {exc}")
    if Path("/sys/fs/cgroup/blkio").is_dir():
        parts.append("v1 blkio at /sys/fs/cgroup/blkio")
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        ctl = Path(root) / "cgroup.controllers"
        if ctl.exists():
            parts.append(f"v2 at {root} controllers: {ctl.read_text().strip() or '(none)'}")
    return "; ".join(parts)


def _schedulers() -> str:
    for dev in sorted(Path("/sys/block").iterdir()):
        p = dev / "queue" / "scheduler"
        if dev.name.startswith("loop") and p.exists():
            return f"loop devices offer: {p.read_text().strip()}"
    return "no loop device present to inspect"


def _space_check() -> dict[str, str]:
    d = paths.scratch_dir()
    probe = d if d.exists() else d.parent
    st = os.statvfs(probe)
    free = st.f_bavail * st.f_frsize
    state = "ok" if free > (4 << 30) else "warn"
    return _check("scratch", state, f"{d}: {free / (1 << 30):.1f} GiB free")

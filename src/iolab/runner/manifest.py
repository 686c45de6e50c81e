"""The machine half of every result's manifest: what must be known to rerun a result."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from iolab import __version__
from iolab.core import children
from iolab.store.urls import scrub


def _first_line(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        out = children.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def cgroup_mode() -> str:
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        return "v2"
    if Path("/sys/fs/cgroup/unified/cgroup.controllers").exists():
        return "hybrid"
    return "v1"


def sched_autogroup() -> int | None:
    """kernel.sched_autogroup_enabled (1: the scheduler shares CPU between sessions first), None
    when the kernel has no autogroups."""
    try:
        return int(Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip())
    except (OSError, ValueError):
        return None


def cpu_governor() -> str | None:
    """The CPU frequency governors in use, e.g. 'performance' or 'schedutil, performance'; None
    without a cpufreq interface (a VM, or a fixed clock)."""
    found = set()
    for g in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor"):
        try:
            found.add(g.read_text().strip())
        except OSError:
            continue
    return ", ".join(sorted(found)) or None


def environment() -> dict[str, Any]:
    uname = os.uname()
    mem = 0
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) * 1024
    return {
        "iolab_version": __version__,
        "python": sys.version.split()[0],
        "hostname": uname.nodename,
        "kernel": uname.release,
        "kernel_version": uname.version,
        "machine": uname.machine,
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "memory_bytes": mem,
        "cgroup_mode": cgroup_mode(),
        "cpu_governor": cpu_governor(),
        "sched_autogroup": sched_autogroup(),
        "fio_version": _first_line(["fio", "--version"]),
        "qemu_version": _first_line(["qemu-system-x86_64", "--version"]),
        "qemu_img_version": _first_line(["qemu-img", "--version"]),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": [scrub(a) for a in sys.argv],  # a --db URL's password never recorded
    }

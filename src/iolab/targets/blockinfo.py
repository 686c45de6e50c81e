"""Facts about a host block device: for manifests, probes and the data-safety guard."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any


def sysfs(dev: str) -> Path:
    return Path("/sys/class/block") / os.path.basename(dev)


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def queue_settings(dev: str) -> dict[str, Any]:
    """Scheduler and queue limits: what decides how requests reach the device."""
    base = sysfs(dev)
    q = base / "queue"
    if not q.exists():  # a partition: the queue belongs to the parent disk
        q = base.parent / "queue" if (base.parent / "queue").exists() else q
    out: dict[str, Any] = {"device": os.path.basename(dev)}
    for name in ("scheduler", "nr_requests", "rotational", "logical_block_size", "physical_block_size",
                 "max_sectors_kb", "read_ahead_kb", "write_cache", "nomerges", "rq_affinity"):
        v = _read(q / name)
        if v is not None:
            out[name] = v
    sched = out.get("scheduler", "")
    if "[" in sched:
        out["scheduler_active"] = sched.split("[", 1)[1].split("]", 1)[0]
    iosched = q / "iosched"
    if iosched.is_dir():
        out["iosched"] = {p.name: _read(p) for p in sorted(iosched.iterdir()) if p.is_file()}
    for name in ("size",):
        v = _read(base / name)
        if v is not None:
            out["size_bytes"] = int(v) * 512
    backing = _read(base / "loop" / "backing_file")
    if backing:
        out["loop_backing_file"] = backing
        out["loop_dio"] = _read(base / "loop" / "dio")
    model = _read(base / "device" / "model")
    if model:
        out["model"] = model
    return out


def device_of_path(path: str) -> str | None:
    """The block device (e.g. 'vda' or 'loop3') holding a file or directory, if any."""
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    link = Path(f"/sys/dev/block/{major}:{minor}")
    return os.path.basename(os.path.realpath(link)) if link.exists() else None


def data_signs(dev: str) -> list[str]:
    """Reasons to believe a device holds data: partitions, signatures, mounts, holders."""
    name = os.path.basename(os.path.realpath(dev))
    signs = []
    base = sysfs(name)
    parts = [p.name for p in base.iterdir() if p.name.startswith(name) and (p / "partition").exists()] \
        if base.exists() else []
    if parts:
        signs.append(f"has partitions: {', '.join(sorted(parts))}")
    holders = list((base / "holders").iterdir()) if (base / "holders").exists() else []
    if holders:
        signs.append(f"is in use by {', '.join(h.name for h in holders)}")
    real = os.path.realpath(dev)
    with open("/proc/mounts") as f:
        for line in f:
            src, mnt = line.split()[:2]
            if os.path.realpath(src) == real or any(os.path.realpath(src) == f"/dev/{p}" for p in parts):
                signs.append(f"is mounted at {mnt}")
    probe = subprocess.run(["blkid", "-p", "-o", "export", dev], capture_output=True, text=True)
    fields = dict(line.split("=", 1) for line in probe.stdout.splitlines() if "=" in line)
    if fields.get("TYPE"):
        signs.append(f"holds a {fields['TYPE']} signature")
    if fields.get("PTTYPE"):
        signs.append(f"holds a {fields['PTTYPE']} partition table")
    return signs

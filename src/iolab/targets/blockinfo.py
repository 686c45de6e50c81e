"""Facts about a host block device, for manifests and probes (the data-safety guard is core.diskguard)."""

from __future__ import annotations

import os
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

"""The I/O scheduler on the target disk: select it, tune it, restore it, describe it.

Weights only mean something to the scheduler that enforces them (BFQ for *.bfq.weight),
and its tunables decide whether it honours them (BFQ's low_latency raises the weight of
newly started queues). Every change is recorded in the ledger (kind "scheduler") before
it is made, so a crash leaves enough to put the device back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from iolab.cgroups import fs
from iolab.cgroups.device import BlockDev, resolve
from iolab.core.resources import Ledger, Resource

# Queue attributes worth keeping in a manifest: they bound how much each group can queue.
QUEUE_FACTS = ("nr_requests", "rotational", "max_sectors_kb", "nomerges", "wbt_lat_usec",
               "max_hw_sectors_kb")


def available(dev: BlockDev) -> list[str]:
    """Schedulers the kernel offers for this queue, e.g. ['none', 'mq-deadline', 'bfq']."""
    return [s.strip("[]") for s in (dev.queue / "scheduler").read_text().split()]


def current(dev: BlockDev) -> str:
    for s in (dev.queue / "scheduler").read_text().split():
        if s.startswith("["):
            return s.strip("[]")
    return "none"  # queues without a choice print just "none"


def select(dev: BlockDev, name: str, ledger: Ledger) -> Resource | None:
    """Make `name` the scheduler; None when it already is (nothing to undo)."""
    prev = current(dev)
    if prev == name:
        return None
    if name not in available(dev):
        raise ValueError(f"{dev.name}: scheduler {name!r} not offered (have {available(dev)})")
    res = ledger.add("scheduler", dev.name, queue=str(dev.queue), scheduler=prev)
    fs.write_value(dev.queue / "scheduler", name)
    if current(dev) != name:
        raise RuntimeError(f"{dev.name}: scheduler still {current(dev)!r} after selecting {name!r}")
    return res


def set_tunables(dev: BlockDev, values: dict[str, Any], ledger: Ledger) -> Resource | None:
    """Write scheduler tunables (iosched/*), recording the old values tied to this scheduler."""
    if not values:
        return None
    old = {k: fs.read_value(dev.iosched / k) for k in values}
    res = ledger.add("scheduler", dev.name, queue=str(dev.queue), scheduler=current(dev),
                     tunables=old)
    for key, value in values.items():
        fs.write_value(dev.iosched / key, str(value))
        got = fs.read_value(dev.iosched / key)
        if got != str(value):
            raise RuntimeError(f"{dev.name}: {key} reads {got!r} after writing {value!r}")
    return res


def undo(info: dict[str, Any]) -> None:
    """Undo one ledger record: tunables only while the same scheduler is active, else the scheduler."""
    queue = Path(info["queue"])
    if not (queue / "scheduler").exists():
        return  # the device is gone; nothing left to restore
    dev = BlockDev(name=queue.parent.name, majmin="", queue=queue)
    if "tunables" in info:
        if current(dev) != info["scheduler"]:
            return  # the scheduler changed since; its iosched dir (and our values) are gone
        for key, value in info["tunables"].items():
            fs.write_value(dev.iosched / key, str(value))
        return
    if current(dev) != info["scheduler"]:
        fs.write_value(queue / "scheduler", info["scheduler"])


def tunables(dev: BlockDev) -> dict[str, str]:
    """The active scheduler's tunables (slice_idle, low_latency, ...); {} for none."""
    if not dev.iosched.is_dir():
        return {}
    return {p.name: _read(p) for p in sorted(dev.iosched.iterdir()) if p.is_file()}


def queue_facts(dev: BlockDev) -> dict[str, Any]:
    """What the manifest needs to explain sharing: scheduler, tunables, queue and tag limits."""
    facts: dict[str, Any] = {"device": dev.name, "majmin": dev.majmin,
                             "scheduler": current(dev), "schedulers": available(dev),
                             "iosched": tunables(dev)}
    for key in QUEUE_FACTS:
        if (dev.queue / key).exists():
            facts[key] = _read(dev.queue / key)
    qd = dev.queue.parent / "device" / "queue_depth"
    if qd.exists():
        facts["queue_depth"] = _read(qd)
    mq = dev.queue.parent / "mq"
    if mq.is_dir():
        facts["hw_queues"] = len([p for p in mq.iterdir() if p.is_dir()])
        tags = sorted({_read(p / "nr_tags") for p in mq.iterdir() if (p / "nr_tags").exists()})
        facts["nr_tags"] = tags[0] if len(tags) == 1 else tags
    return facts


def describe(device: str) -> dict[str, Any]:
    return queue_facts(resolve(device))


def _read(p: Path) -> str:
    try:
        return p.read_text().strip()
    except OSError as exc:  # some attributes are write-only or refuse reads on some devices
        return f"<{exc.strerror}>"


def bfq_missing(dev: BlockDev | None) -> str | None:
    """Why BFQ-based weighting cannot run on this device, or None."""
    if dev is not None and "bfq" not in available(dev):
        return f"BFQ is not offered for {dev.name} (modprobe bfq?)"
    return None

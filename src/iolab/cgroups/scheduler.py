"""The I/O scheduler on the target disk: select it, tune it, restore it, describe it.

Weights only mean something to the scheduler that enforces them (BFQ for *.bfq.weight),
and its tunables decide whether it honours them (BFQ's low_latency raises the weight of
newly started queues). Every change is a claim in the machine-wide record of the device
(cgroups.queue_claims) and an entry in the ledger (kind "scheduler", one format:
{queue, claim}) written before it is made, so a crash leaves enough to put the device back,
and two runs sharing a device restore it only when the last of them ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from iolab.cgroups import fs, queue_claims
from iolab.cgroups.device import BlockDev, resolve, short_name
from iolab.core.resources import Ledger, Resource

# Queue attributes worth keeping in a manifest: they bound how much each group can queue.
QUEUE_FACTS = ("nr_requests", "rotational", "max_sectors_kb", "nomerges", "wbt_lat_usec",
               "max_hw_sectors_kb")


def available(dev: BlockDev) -> list[str]:
    """Schedulers the kernel offers for this queue, e.g. ['none', 'mq-deadline', 'bfq']."""
    return [s.strip("[]") for s in (dev.queue / "scheduler").read_text().split()]


def current(dev: BlockDev) -> str:
    return current_of(dev.queue)  # queues without a choice print just "none"


def select(dev: BlockDev, name: str, ledger: Ledger) -> Resource:
    """Make `name` the scheduler, as a claim (cgroups.queue_claims): even when it already is,
    so another run cannot switch it away while this one measures, and the original comes
    back only when the last run holding the device ends."""
    if name not in available(dev):
        raise ValueError(f"{dev.name}: scheduler {name!r} not offered (have {available(dev)})")
    with ledger.creating("scheduler", dev.name, queue=str(dev.queue), claim=True) as res:
        queue_claims.claim(dev, res.rid, scheduler=name)
    return res


def set_tunables(dev: BlockDev, values: dict[str, Any], ledger: Ledger) -> Resource | None:
    """Write scheduler tunables (iosched/*) as a claim; read back, restored by the last holder."""
    if not values:
        return None
    with ledger.creating("scheduler", dev.name, queue=str(dev.queue), claim=True) as res:
        queue_claims.claim(dev, res.rid, iosched={k: str(v) for k, v in values.items()})
    return res


def undo(res: Resource) -> None:
    """Undo one ledger entry of kind "scheduler", in any format iolab ever wrote.

    Current: {queue, claim: true} -> release the claim (restores if it was the last).
    Before 0.2: {queue, scheduler[, tunables]} (cgroups) and {previous} (loop target):
    put the recorded value back, tunables only while the same scheduler is active.
    """
    info = res.info
    if info.get("claim"):
        queue_claims.release(Path(str(info["queue"])), res.rid)
        return
    if "previous" in info:
        queue = Path("/sys/block") / short_name(res.ident) / "queue"
        if (queue / "scheduler").exists() and current_of(queue) != info["previous"]:
            fs.write_value(queue / "scheduler", str(info["previous"]))
        return
    if "queue" not in info or "scheduler" not in info:
        return  # nothing this iolab knows how to undo (a newer or damaged entry): leave the device alone
    queue = Path(str(info["queue"]))
    if not (queue / "scheduler").exists():
        return  # the device is gone; nothing left to restore
    if "tunables" in info:
        if current_of(queue) != info["scheduler"]:
            return  # the scheduler changed since; its iosched dir (and our values) are gone
        for key, value in dict(info["tunables"]).items():
            if (queue / "iosched" / key).exists():
                fs.write_value(queue / "iosched" / key, str(value))
        return
    if current_of(queue) != info["scheduler"]:
        fs.write_value(queue / "scheduler", str(info["scheduler"]))


def current_of(queue: Path) -> str:
    for s in (queue / "scheduler").read_text().split():
        if s.startswith("["):
            return s.strip("[]")
    return "none"


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

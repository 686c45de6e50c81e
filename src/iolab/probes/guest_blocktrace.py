"""The guest kernel's block requests to the test disk, from its `block:block_rq_issue` tracepoint.

/sys/block/<dev>/stat (probe `guest_disk`) counts writes and flushes but not FUA writes.
This probe counts every request the guest's block layer *issued to the driver* for the
test disk, by the request's `rwbs` flags (kernel `blk_fill_rwbs`, kernel/trace/blktrace.c):

    [F]  op  [F][A][S][M]
     |    |   |
     |    |   +-- REQ_FUA  (the write is durable when it completes)
     |    +------ W write, R read, D discard (DE secure erase), F flush (REQ_OP_FLUSH;
     |            'N' on kernels that print other/none ops that way), N other
     +----------- REQ_PREFLUSH (a cache flush before the request)

Counted at *issue*: the flush machinery has already turned a FUA write into data + post-flush
on a disk without FUA (queue/fua = 0) and stripped REQ_FUA, so `fua_writes` is what the
virtual disk received as FUA. The block layer issues a flush as `FF` (REQ_OP_FLUSH with
REQ_PREFLUSH). Seen in the built-in guest (Linux 6.1):

* buffered 64 KiB write + fdatasync(): `WS` then `FF` (any bus with a write-back cache);
* O_DIRECT|O_DSYNC 64 KiB write on nvme (queue/fua = 1): `WFS` then `FF` (the FUA write,
  then blkdev_fsync's flush); on virtio-scsi (queue/fua = 0 in QEMU's scsi-hd unless
  dpofua=on): `WS`, `FF` (the emulated FUA), `FF`.

Events go to a trace instance of its own (`instances/iolab-blocktrace`, 4 MiB per CPU),
filtered in the kernel to the test disk's dev_t ((major << 20) | minor). If the buffer
overflowed, `lost_events` > 0 and the counts are a lower bound (`complete: false`).
Opt-in (`default = False`): a study asks for it with `probes = ["guest_blocktrace"]`.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest
from iolab.core.metrics import Metric
from iolab.probes.base import Probe
from iolab.targets.base import Placement

INSTANCE = "iolab-blocktrace"
BUFFER_KB = 4096
EVENT = "events/block/block_rq_issue"
OPS = ("W", "R", "D", "F", "N")
_LINE = re.compile(r"block_rq_issue: (\d+),(\d+) ([A-Z]+) ")
_HEADER = re.compile(r"entries-in-buffer/entries-written: (\d+)/(\d+)")
_STAT = re.compile(r"^(overrun|commit overrun|dropped events): (\d+)\s*$", re.M)

# Shell run in the guest (busybox sh). $D = block device name. Finds tracefs, (re)creates the
# instance, filters to the device's dev_t and enables the event.
_START = r"""set -e
T=
for t in /sys/kernel/tracing /sys/kernel/debug/tracing; do
    if [ -d "$t/instances" ]; then T=$t; break; fi
done
[ -n "$T" ] || { echo "no tracefs (mount debugfs or tracefs)" >&2; exit 2; }
I=$T/instances/@INSTANCE@
if [ -d "$I" ]; then echo 0 > "$I/@EVENT@/enable"; rmdir "$I"; fi
mkdir "$I"
mm=$(cat /sys/block/$D/dev)
maj=${mm%:*}; min=${mm#*:}
echo @BUFFER_KB@ > "$I/buffer_size_kb"
echo "dev == $(( (maj << 20) | min ))" > "$I/@EVENT@/filter"
echo 1 > "$I/@EVENT@/enable"
echo 1 > "$I/tracing_on"
echo "$T"
echo "$maj,$min"
cat /sys/block/$D/queue/fua 2>/dev/null || echo -
"""

_STOP = r"""set -e
I=$T/instances/@INSTANCE@
echo 0 > "$I/tracing_on"
echo 0 > "$I/@EVENT@/enable"
cat "$I"/per_cpu/cpu*/stats
echo "=== trace"
cat "$I/trace"
rmdir "$I"
"""


def _script(s: str) -> str:
    return s.replace("@INSTANCE@", INSTANCE).replace("@EVENT@", EVENT).replace("@BUFFER_KB@", str(BUFFER_KB))


def parse_rwbs(rwbs: str) -> tuple[bool, str, str]:
    """(preflush, op, modifiers) of one rwbs string: 'FF' -> (True, 'F', ''), 'WFS' -> (False, 'W', 'FS')."""
    preflush = len(rwbs) >= 2 and rwbs[0] == "F" and rwbs[1] in OPS
    rest = rwbs[1:] if preflush else rwbs
    if not rest:
        return preflush, "", ""
    if rest.startswith("DE"):
        return preflush, "DE", rest[2:]
    return preflush, rest[0], rest[1:]


def count_rwbs(trace_text: str, dev: str) -> dict[str, Any]:
    """Counts of block_rq_issue lines for dev ("major,minor") in a tracefs `trace` file.

    writes: op W (fua_writes: those with REQ_FUA; preflush_writes: with REQ_PREFLUSH);
    flushes: flush requests (op F, or N with PREFLUSH: a flush-only request),
    preflush: requests carrying REQ_PREFLUSH; reads, discards, other; by_rwbs: raw counts.
    lost_events: entries-written − entries-in-buffer from the header (0 if none lost).
    """
    c = {"requests": 0, "writes": 0, "fua_writes": 0, "preflush_writes": 0, "flushes": 0, "preflush": 0,
         "reads": 0, "discards": 0, "other": 0, "write_bytes": 0}
    by: dict[str, int] = {}
    lost = 0
    for line in trace_text.splitlines():
        h = _HEADER.search(line)
        if h and line.lstrip().startswith("#"):
            lost += max(0, int(h.group(2)) - int(h.group(1)))
            continue
        m = _LINE.search(line)
        if not m or f"{m.group(1)},{m.group(2)}" != dev:
            continue
        rwbs = m.group(3)
        by[rwbs] = by.get(rwbs, 0) + 1
        c["requests"] += 1
        preflush, op, mods = parse_rwbs(rwbs)
        c["preflush"] += preflush
        if op == "W":
            c["writes"] += 1
            c["fua_writes"] += "F" in mods
            c["preflush_writes"] += preflush
            b = re.match(r"\s*(\d+)", line[m.end():])
            c["write_bytes"] += int(b.group(1)) if b else 0
        elif op == "F" or (op == "N" and preflush):
            c["flushes"] += 1
        elif op == "R":
            c["reads"] += 1
        elif op in ("D", "DE"):
            c["discards"] += 1
        else:
            c["other"] += 1
    out: dict[str, Any] = dict(c)
    out["by_rwbs"] = dict(sorted(by.items()))
    out["lost_events"] = lost
    return out


def lost_from_stats(stats_text: str) -> int:
    """Sum of overrun + commit overrun + dropped events over per_cpu/cpu*/stats."""
    return sum(int(m.group(2)) for m in _STAT.finditer(stats_text))


class GuestBlockTrace(Probe):
    name: ClassVar[str] = "guest_blocktrace"
    default: ClassVar[bool] = False  # tracing in the guest: only studies that count FUA writes ask
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("requests", "requests", "neither", "block requests issued to the test disk's driver"),
        Metric("{op:writes|reads|discards|flushes|other}", "requests", "neither", "issued requests of one kind"),
        Metric("fua_writes", "requests", "neither", "writes issued with REQ_FUA"),
        Metric("preflush_writes", "requests", "neither", "writes issued with REQ_PREFLUSH"),
        Metric("preflush", "requests", "neither", "requests carrying REQ_PREFLUSH"),
        Metric("write_bytes", "bytes", "neither", "bytes in issued writes"),
        Metric("by_rwbs.{rwbs:label}", "requests", "neither", "issued requests by their rwbs flags"),
        Metric("lost_events", "events", "lower", "trace events lost to buffer overflow (counts are then a bound)"),
    )
    attributes: ClassVar[tuple[str, ...]] = ("complete", "device", "dev", "queue_fua", "notes")

    @classmethod
    def applies_to(cls, placement: Placement) -> bool:
        return bool(placement.guest_device) and placement.executor.name == "guest"

    def _sh(self, script: str, env: dict[str, str]) -> str:
        res = self.executor.run(ExecRequest(["sh", "blocktrace.sh"], timeout_s=60,
                                            files={"blocktrace.sh": script}, env=env))
        if res.returncode != 0:
            raise TrialFailed(f"guest_blocktrace: tracing the guest's block layer failed: {res.tail()}")
        return res.stdout

    def start(self, placement: Placement) -> None:
        self.executor = placement.executor
        self.device = str(placement.guest_device)
        lines = self._sh(_script(_START), {"D": self.device}).split()
        if len(lines) < 3:
            raise TrialFailed(f"guest_blocktrace: unexpected start output {lines!r}")
        self.tracefs, self.dev, fua = lines[-3], lines[-2], lines[-1]
        self.queue_fua = int(fua) if fua.isdigit() else None

    def stop(self) -> dict[str, Any]:
        text = self._sh(_script(_STOP), {"T": self.tracefs})
        stats, _, trace = text.partition("=== trace\n")
        out = count_rwbs(trace, self.dev)
        out["lost_events"] = max(out["lost_events"], lost_from_stats(stats))
        out["complete"] = out["lost_events"] == 0
        out["device"] = self.device
        out["dev"] = self.dev
        out["queue_fua"] = self.queue_fua
        if not out["complete"]:
            out["notes"] = [f"trace buffer overflowed: {out['lost_events']} events lost, counts are a lower bound"]
        return out

"""Confounder detection: when a number cannot mean what it seems, say so next to it.

Pure: takes what a trial measured and what the probes saw, returns flags.
"""

from __future__ import annotations

from typing import Any

# disk_shared (probes/under_disk.py): what the disk under the target may move for the trial's own
# I/O besides what the loop device counted. Each flush of the loop is one fsync of its file, which
# costs the disk under one flush, or two when it commits the journal of the filesystem under on a
# disk without FUA (a loop device under: 911 for 513); that journal also commits every few seconds
# (ext4: 5 s) by itself. Bytes are amplified by it too (512-byte O_SYNC writes moved 3x their bytes).
FLUSH_AMPLIFICATION = 2  # the disk under may flush this many times per flush of the loop
OTHER_FLUSHES_ALLOWED = 4  # plus one per OTHER_FLUSH_SECONDS of the trial
OTHER_FLUSH_SECONDS = 2.0
BYTES_AMPLIFICATION = 4  # the disk under may move this many times the loop's bytes
OTHER_BYTES_ALLOWED = 32 << 20  # plus this much (metadata, a log line)


def detect(workload: dict[str, Any], metrics: dict[str, float], probes: dict[str, Any]) -> list[str]:
    flags: list[str] = []
    disk = probes.get("host_disk") or {}
    cache = probes.get("page_cache") or {}
    read_bytes = metrics.get("read_bytes", 0.0)
    if read_bytes > (8 << 20) and disk and "guest_disk" not in probes:
        seen = disk.get("read_bytes", 0)
        if seen < 0.5 * read_bytes:
            flags.append(f"reads_hit_page_cache: the device saw {seen / read_bytes:.0%} of the bytes the workload read")
    written = metrics.get("write_bytes", 0.0)
    if workload.get("direct") and written > (8 << 20) and cache.get("cached_delta_bytes", 0) > 0.5 * written:
        flags.append("mode_not_effective: direct I/O grew the page cache by "
                     f"{cache['cached_delta_bytes'] / written:.0%} of the bytes written")
    if disk and probes.get("under_disk"):
        flags += disk_shared(disk, probes["under_disk"])
    return flags


def disk_shared(own: dict[str, Any], under: dict[str, Any]) -> list[str]:
    """`disk_shared` when the disk under the target's loop device moved clearly more than the
    trial did: other processes' syncs (flushes beyond twice the trial's own and iolab's own
    ledger fsyncs, and the journal's few) or their bytes (beyond the filesystem's amplification
    of the trial's own). A neighbour quieter than the trial itself goes unflagged: the counters
    cannot tell it from the trial's own amplification."""
    own_bytes = own.get("read_bytes", 0) + own.get("write_bytes", 0)
    other_bytes = under.get("read_bytes", 0) + under.get("write_bytes", 0) - own_bytes
    own_flushes = own.get("flushes", 0)
    other_flushes = under.get("flushes", 0) - own_flushes
    iolab_syncs = under.get("iolab_syncs", 0)  # its ledger's fsyncs, if its data dir is on that disk
    flushes_allowed = ((FLUSH_AMPLIFICATION - 1) * own_flushes + FLUSH_AMPLIFICATION * iolab_syncs
                       + OTHER_FLUSHES_ALLOWED + under.get("seconds", 0.0) / OTHER_FLUSH_SECONDS)
    bytes_allowed = (BYTES_AMPLIFICATION - 1) * own_bytes + OTHER_BYTES_ALLOWED
    if other_flushes <= flushes_allowed and other_bytes <= bytes_allowed:
        return []
    return [f"disk_shared: the disk under the target ({under.get('device')}) moved "
            f"{_mib(other_bytes)} and {max(other_flushes, 0)} flushes in "
            f"{under.get('seconds', 0.0):.1f} s besides the trial's own {_mib(own_bytes)} and "
            f"{own_flushes} flushes"]


def _mib(n: float) -> str:
    return f"{max(n, 0) / (1 << 20):.1f} MiB"

"""Confounder detection: when a number cannot mean what it seems, say so next to it.

Pure: takes what a trial measured and what the probes saw, returns flags.
"""

from __future__ import annotations

from typing import Any


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
    return flags

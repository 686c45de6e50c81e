"""virtio's spec: the iozone workload on the host (ext4 on the scratch loop device) and in a guest
per disk bus (ext4 on the virtual disk, whose image sits on a scratch loop device of its own)."""

from __future__ import annotations

from typing import Any

from iolab.studies.iozone import spec as iozone

NAME = "virtio"
SUMMARY = "R1: host vs QEMU guests (virtio-blk, ide; nvme, virtio-scsi, ahci), iozone tests, ratio vs host"
MAIN_BUSES = ["virtio-blk", "ide"]
EXTRA_BUSES = ["nvme", "virtio-scsi", "ahci"]
QUICK_TESTS = ["write", "read", "randread"]
QUICK_RECORDS = ["4k", "4m"]


def build(quick: bool) -> dict[str, Any]:
    """--quick keeps every system (every row of R1's table) but fewer tests and records: under
    TCG each guest trial costs seconds of emulation, and six systems must fit in minutes."""
    file_size = "8M" if quick else "100M"
    guest = {"kind": "qemu", "format": "raw", "cache": "none", "aio": "threads", "guest_fs": "ext4",
             "disk_size": "128M" if quick else "256M", "memory": "512M", "prefill": False}
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 6,
                  "ci_target": 0.05, "description": SUMMARY},
        "targets": [{"name": "host", "kind": "loop", "size": "256M" if quick else "512M", "filesystem": "ext4"}]
        + [dict(guest, name=bus, bus=bus) for bus in MAIN_BUSES + EXTRA_BUSES],
        **iozone.workloads(QUICK_TESTS if quick else iozone.TESTS, QUICK_RECORDS if quick else iozone.RECORDS,
                           file_size),
    }

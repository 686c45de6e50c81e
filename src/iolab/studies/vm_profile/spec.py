"""vm-profile's spec: the same CPU, memory, disk and network workloads on the host (a scratch loop
device with ext4, its loopback) and in a guest per VM profile."""

from __future__ import annotations

import os
from typing import Any

from iolab.core import sizing
from iolab.core.units import format_size

NAME = "vm-profile"
SUMMARY = "R5: CPU, memory, disk and network of guests per VM profile (performance, encrypted) vs host"
PROFILES = ["performance", "encrypted"]
FIO_PATTERNS = ["randread", "randwrite", "read", "write", "randrw"]
DIRECTIONS = ["guest_to_host", "host_to_guest", "guest_to_guest"]
QUICK_ARRAY_MIB = 128  # --quick: at most 3 x 128 MiB STREAM arrays (4x a 32 MiB LLC)


def build(quick: bool) -> dict[str, Any]:
    """--quick keeps every metric and every system, with short runs and small files."""
    vcpus = max(1, min(os.cpu_count() or 1, 8))
    host_mem = sizing.host_memory()
    # The guests' memory holds the same STREAM arrays as the host's (4x this host's LLC),
    # bounded by what this host has: host and guests then move the same bytes. --quick also
    # bounds them by time: a 260 MiB LLC asks for 3 x 1040 MiB, minutes per trial in a TCG
    # guest; capped arrays are flagged `array_below_4x_llc` on every system alike.
    llc = sizing.read_llc()
    quick_cap = min(QUICK_ARRAY_MIB, -(-sizing.LLC_FACTOR * llc.bytes // sizing.MiB)) if quick else None
    arrays = sizing.stream_arrays(llc, host_mem, quick_cap)
    memory = sizing.guest_memory_for(arrays.array_mib, host_mem)
    guest = {"kind": "qemu", "guest_fs": "ext4", "disk_size": "256M" if quick else "5G",
             "memory": format_size(memory.bytes),
             "vcpus": vcpus, "network": "user", "net_peer": True,
             "extra_binaries": ["/usr/bin/sysbench", "/usr/bin/iperf3"],
             "native_helpers": ["iolab_primes", "iolab_stream"]}
    seconds = 3 if quick else 30
    # --quick: the disk and network parts run 1 s (fio after a 0.5 s ramp; the CPU part keeps
    # 3 s, R5's CPU claim reads it). 1 s of 4 KiB I/O at iodepth 16 is thousands of I/Os even in
    # a TCG guest, far above fio's millisecond clock (`short_run` below 100 ms); iperf3 moves
    # megabytes. About 2 s less for each of the 72 disk and network trials (docs/reproduce.md "Time").
    io_seconds, ramp = (1, 0.5) if quick else (seconds, 1)
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 6,
                  "ci_target": 0.05, "description": SUMMARY},
        "targets": [{"name": "host", "kind": "loop", "size": "256M" if quick else "5G", "filesystem": "ext4"}]
        + [{"name": p, "profile": p, **guest} for p in PROFILES],
        "workloads": [
            {"kind": "primes"},
            {"kind": "sysbench-cpu", "threads": [1, 0], "time": seconds},
            {"kind": "stream", "ntimes": 3 if quick else 10, **({"array_mib": quick_cap} if quick else {})},
            {"kind": "fio", "rw": FIO_PATTERNS, "bs": "4k", "size": "64M" if quick else "4G", "iodepth": 16,
             "ioengine": "libaio", "direct": True, "runtime": io_seconds, "ramp_time": ramp},
            {"kind": "iperf3", "direction": DIRECTIONS, "time": io_seconds},
        ],
    }

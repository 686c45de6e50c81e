"""fleet-scan's spec: the same quick fio matrix on every host of a fleet, to find the hosts that
differ. 4 KiB random reads at queue depth 1 (latency-bound) and 32 (parallelism), 1 MiB
sequential reads and writes (bandwidth), direct I/O on each host's device or file.

The hosts come from a hosts file (`iolab study fleet-scan --hosts FILE`, fleet/hosts.py);
`build` carries EXAMPLE_HOSTS so `--print-spec` shows the whole shape. The repetitions are
fixed (repetitions = max_repetitions): the outlier verdicts are many comparisons at once,
and a fixed n keeps their p-values exact (docs/studies/fleet-scan.md).
"""

from __future__ import annotations

from typing import Any

NAME = "fleet-scan"
SUMMARY = "every host of a fleet: 4k randread QD1/QD32, 1M seq read/write; which hosts are outliers, by how much"
NEEDS_HOSTS = True  # the CLI asks for --hosts FILE and puts its [[hosts]] into target.hosts
EXAMPLE_HOSTS: list[dict[str, Any]] = [
    {"name": "rack1_07", "address": "192.0.2.7", "port": 8765, "device": "/dev/nvme1n1"},
    {"name": "rack1_08", "address": "192.0.2.8", "port": 8765, "device": "/dev/nvme1n1"},
    {"name": "rack1_09", "address": "192.0.2.9", "port": 8765, "device": "/dev/nvme1n1"},
]
TOLERANCE = 0.05  # a host within ±5 % of the fleet median is never named, however tight its interval


def build(quick: bool) -> dict[str, Any]:
    reps = 5  # quick too: with 3 a side, Welch has ~2 degrees of freedom and even a 90x change
    # cannot survive Holm over the ~100 rows a fleet comparison has (measured: "undecided")
    timing = {"runtime": 2 if quick else 20, "ramp_time": 0.5 if quick else 2, "size": "32M" if quick else "1G"}
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": reps, "max_repetitions": reps,
                  "ci_target": 0.05, "description": SUMMARY},
        "target": {"kind": "fleet", "hosts": [dict(h) for h in EXAMPLE_HOSTS]},
        "workloads": [
            {"name": "rand4k", "kind": "fio", "rw": "randread", "bs": 4096, "iodepth": [1, 32],
             "ioengine": "libaio", "direct": True, **timing},
            {"name": "seq1m", "kind": "fio", "rw": ["read", "write"], "bs": "1M", "iodepth": 8,
             "ioengine": "libaio", "direct": True, **timing},
        ],
    }

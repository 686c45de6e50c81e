"""iozone's spec: iozone's six tests x record sizes on a file in ext4 on the scratch loop device,
O_DIRECT, the final flush inside the timing; the workload tables sized as iozone sizes them
(virtio reuses `workloads` for its guests)."""

from __future__ import annotations

from typing import Any

from iolab.core.units import format_size, parse_size

NAME = "iozone"
SUMMARY = "R1 host rows: write, rewrite, read, reread, randread, randwrite x 4k/4m/16m records, KB/s"
TESTS = ["write", "rewrite", "read", "reread", "randread", "randwrite"]
RECORDS = ["4k", "4m", "16m"]


def build(quick: bool) -> dict[str, Any]:
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 6,
                  "ci_target": 0.05, "description": SUMMARY},
        "target": {"kind": "loop", "size": "512M", "filesystem": "ext4"},
        **workloads(TESTS, RECORDS, "32M" if quick else "100M"),
    }


def workloads(tests: list[str], records: list[str], file_size: str) -> dict[str, Any]:
    """The iozone workload table(s) for `iozone -s FILE_SIZE -r RECORD...`, sized as iozone sizes them.

    iozone writes whole records only: numrecs64 = filesize / reclen, filebytes64 = numrecs64 * reclen
    (iozone.c, write_perf_test), and reports KB/s over those bytes. R1's `-s 100M -r 16384k` therefore
    wrote 6 records = 96 MiB, while 4k and 4m records fill all 100 MiB. One table per effective size.
    """
    size = parse_size(file_size)
    by_size: dict[int, list[str]] = {}
    for rec in records:
        r = parse_size(rec)
        by_size.setdefault(size // r * r, []).append(rec)
    tables = [{"name": f"iozone-{format_size(n)}", "kind": "iozone", "test": tests, "record": recs,
               "file_size": format_size(n)} for n, recs in by_size.items()]
    if len(tables) == 1:
        return {"workload": {k: v for k, v in tables[0].items() if k != "name"}}
    return {"workloads": tables}

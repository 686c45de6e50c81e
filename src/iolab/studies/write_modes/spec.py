"""write-modes' spec: the native helper's four modes x block sizes, and fio doing the o_sync and
o_direct writes like for like (the cross-check)."""

from __future__ import annotations

from typing import Any

NAME = "write-modes"
SUMMARY = "R2: buffered, O_SYNC, O_DIRECT and mmap writes vs block size 512 B..1 MiB; knee per mode"
MODES = ["buffered", "o_sync", "o_direct", "mmap"]

def build(quick: bool) -> dict[str, Any]:
    sizes = [512, 4096, 65536, 1 << 20] if quick else [512 << i for i in range(12)]
    data = "2M" if quick else "5M"
    check_bs = [4096] if quick else [4096, 65536]
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 8,
                  "ci_target": 0.1, "description": SUMMARY},
        "target": {"kind": "loop", "size": "256M", "filesystem": "ext4"},
        "workloads": [
            {"name": "helper", "kind": "writemode", "mode": MODES, "bs": sizes, "size": data},
            _fio_check("fio-o_direct", check_bs, data, direct=True),
            _fio_check("fio-o_sync", check_bs, data, direct=False),
        ],
    }


def _fio_check(name: str, bs: list[int], data: str, *, direct: bool) -> dict[str, Any]:
    """fio doing the helper's writes like for like: a new file per trial (appends), same mode and data."""
    return {"name": name, "kind": "fio", "rw": "write", "bs": bs, "size": data, "runtime": 0, "ramp_time": 0,
            "ioengine": "psync", "direct": direct, "sync": not direct, "end_fsync": True, "fresh_file": True}

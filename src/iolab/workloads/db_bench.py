"""A tenant of fio-groups (groups/tenant.py): RocksDB's db_bench in its own weighted cgroup.

A small database is loaded once per target (fillrandom, untimed) on the target's ext4;
each trial then runs a mixed read/write benchmark (readrandomwriterandom, 90 % reads)
with direct reads and a small block cache, so its reads reach the device that the fio
groups compete for. db_bench comes from Debian's rocksdb-tools. R4 ran YCSB workload A
instead (workloads/ycsb_tenant.py, what study cgroup-weights runs); db_bench stays a choice
(`tenant_app = "db_bench"`, the default of a user's spec).

The database is loaded once per target; a marker file beside it (written once the load
succeeded) says so and keeps the load's facts, which every tenant trial copies into its
own manifest entries (`tenant_db`).
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

from iolab.core.errors import CapabilityMissing, TrialFailed
from iolab.core.exec import ExecRequest, ExecResult
from iolab.core.metrics import Metric
from iolab.targets.base import Placement
from iolab.workloads.groups.params import FioGroupsParams
from iolab.workloads.groups.tenant import TenantApp

KEYS = 200_000
VALUE_SIZE = 400
CACHE_BYTES = 8 << 20
LOADED_MARKER = "iolab-loaded.json"  # inside the database directory, written after fillrandom succeeded
_OPS = re.compile(r"^readrandomwriterandom\s*:\s*([\d.]+) micros/op\s+(\d+) ops/sec", re.M)
_SECTION = re.compile(r"Microseconds per (read|write):\n(.*?)(?=\nMicroseconds per |\Z)", re.S)
_PCT = re.compile(r"Percentiles: P50: ([\d.]+) P75: ([\d.]+) P99: ([\d.]+)")
_AVG = re.compile(r"Count: (\d+) Average: ([\d.]+)")


# What parse() produces besides the names every tenant shares (groups/tenant.py METRICS).
TENANT_METRICS: tuple[Metric, ...] = (
    Metric("tenant_micros_per_op", "µs", "lower", "db_bench's mean time per operation"),
    Metric("tenant_{side:read|write}s", "operations", "neither", "operations of one type db_bench completed"),
)


def binary() -> str:
    exe = shutil.which("db_bench")
    if not exe:
        raise CapabilityMissing("db_bench not found: install Debian's rocksdb-tools (apt-get install rocksdb-tools)")
    return exe


def db_dir(placement: Placement) -> str:
    if not placement.directory:
        raise TrialFailed("the tenant needs a directory on a filesystem; this target offers none")
    return f"{placement.directory.rstrip('/')}/rocksdb"


def common_args(db: str) -> list[str]:
    return [f"--db={db}", f"--num={KEYS}", f"--value_size={VALUE_SIZE}", "--compression_type=none",
            "--threads=1", "--statistics=0"]


def ensure_loaded(p: FioGroupsParams, placement: Placement, timeout_s: float) -> dict[str, Any]:
    """fillrandom once per target (outside any weighted group); later trials reuse the DB.
    Returns the load's facts for the trial's manifest."""
    db = db_dir(placement)
    marker = Path(db) / LOADED_MARKER
    try:
        return dict(json.loads(marker.read_text()))
    except (OSError, ValueError, TypeError):
        pass  # not loaded yet (or the load never finished): load it now
    t0 = time.monotonic()
    res = placement.executor.run(ExecRequest(
        argv=[binary(), *common_args(db), "--benchmarks=fillrandom", "--use_direct_io_for_flush_and_compaction=true"],
        timeout_s=timeout_s))
    if res.returncode != 0:
        raise TrialFailed(f"db_bench fillrandom failed ({res.returncode}): {res.tail()}")
    facts = {"keys": KEYS, "value_size": VALUE_SIZE, "dir": db, "load_s": round(time.monotonic() - t0, 2)}
    marker.write_text(json.dumps(facts))
    return facts


def bench_argv(p: FioGroupsParams, placement: Placement) -> list[str]:
    return [binary(), *common_args(db_dir(placement)), "--use_existing_db=1", "--benchmarks=readrandomwriterandom",
            "--readwritepercent=90", "--use_direct_reads=true", f"--cache_size={CACHE_BYTES}", "--histogram=1",
            f"--duration={max(int(round(p.runtime)), 1)}"]


def parse(stdout: str) -> dict[str, float]:
    """ops/s and latency (µs) from db_bench's text: the summary line and --histogram sections."""
    m = _OPS.search(stdout)
    if not m:
        raise TrialFailed(f"db_bench printed no readrandomwriterandom result: {stdout[-400:]}")
    out = {"tenant_ops_s": float(m.group(2)), "tenant_micros_per_op": float(m.group(1))}
    for side, body in _SECTION.findall(stdout):
        pct, avg = _PCT.search(body), _AVG.search(body)
        if pct:
            out[f"tenant_{side}_p50_us"] = float(pct.group(1))
            out[f"tenant_{side}_p99_us"] = float(pct.group(3))
        if avg:
            out[f"tenant_{side}_mean_us"] = float(avg.group(2))
            out[f"tenant_{side}s"] = float(avg.group(1))
    return out


def result(res: ExecResult) -> tuple[dict[str, float], list[str]]:
    if res.returncode != 0:
        raise TrialFailed(f"db_bench exited {res.returncode}: {res.tail()}")
    return parse(res.stdout), []


APP = TenantApp("db_bench", "RocksDB db_bench", TENANT_METRICS, prepare=ensure_loaded, argv=bench_argv,
                result=result, touches=f"a RocksDB database of {KEYS} keys (db_bench fillrandom) in rocksdb/ on the "
                                       "target's ext4, loaded once per target")

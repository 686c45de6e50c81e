"""The tenant of study cgroup-weights: RocksDB's db_bench in its own weighted cgroup (R4, exp. 2).

A small database is loaded once per target (fillrandom, untimed) on the target's ext4;
each trial then runs a mixed read/write benchmark (readrandomwriterandom, 90 % reads)
with direct reads and a small block cache, so its reads reach the device that the fio
groups compete for. "alone" runs it by itself in its group; "beside" releases it at the
same gate as the fio groups. db_bench comes from Debian's rocksdb-tools.

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
from iolab.core.exec import ExecRequest
from iolab.core.metrics import Metric
from iolab.targets.base import Placement
from iolab.workloads.base import WorkloadResult
from iolab.workloads.groups.params import FioGroupsParams
from iolab.workloads.groups.run import run_groups

KEYS = 200_000
VALUE_SIZE = 400
CACHE_BYTES = 8 << 20
LOADED_MARKER = "iolab-loaded.json"  # inside the database directory, written after fillrandom succeeded
_OPS = re.compile(r"^readrandomwriterandom\s*:\s*([\d.]+) micros/op\s+(\d+) ops/sec", re.M)
_SECTION = re.compile(r"Microseconds per (read|write):\n(.*?)(?=\nMicroseconds per |\Z)", re.S)
_PCT = re.compile(r"Percentiles: P50: ([\d.]+) P75: ([\d.]+) P99: ([\d.]+)")
_AVG = re.compile(r"Count: (\d+) Average: ([\d.]+)")


_SIDE = "{side:read|write}"
# What parse() and the tenant-alone trial produce (declared on the fio-groups workload).
TENANT_METRICS: tuple[Metric, ...] = (
    Metric("tenant_ops_s", "ops/s", "higher", "db_bench readrandomwriterandom operations per second"),
    Metric("tenant_micros_per_op", "µs", "lower", "db_bench's mean time per operation"),
    Metric(f"tenant_{_SIDE}_p50_us", "µs", "lower", "db_bench median latency of one operation type"),
    Metric(f"tenant_{_SIDE}_p99_us", "µs", "lower", "db_bench 99th-percentile latency of one operation type"),
    Metric(f"tenant_{_SIDE}_mean_us", "µs", "lower", "db_bench mean latency of one operation type"),
    Metric(f"tenant_{_SIDE}s", "operations", "neither", "operations of one type db_bench completed"),
    Metric("tenant_iops_kernel", "IOPS", "higher",
           "the tenant group's IOPS from kernel counters: over the steady window beside the groups, "
           "over db_bench's run when alone"),
)


def binary() -> str:
    exe = shutil.which("db_bench")
    if not exe:
        raise CapabilityMissing("db_bench not found: install Debian's rocksdb-tools (apt-get install rocksdb-tools)")
    return exe


def db_dir(placement: Placement) -> str:
    if not placement.directory:
        raise TrialFailed("the tenant needs a filesystem on the target: use the cgroups target with filesystem=ext4")
    return f"{placement.directory.rstrip('/')}/rocksdb"


def common_args(db: str) -> list[str]:
    return [f"--db={db}", f"--num={KEYS}", f"--value_size={VALUE_SIZE}", "--compression_type=none",
            "--threads=1", "--statistics=0"]


def ensure_loaded(placement: Placement, timeout_s: float) -> dict[str, Any]:
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


def bench_argv(placement: Placement, duration_s: float) -> list[str]:
    return [binary(), *common_args(db_dir(placement)), "--use_existing_db=1", "--benchmarks=readrandomwriterandom",
            "--readwritepercent=90", "--use_direct_reads=true", f"--cache_size={CACHE_BYTES}", "--histogram=1",
            f"--duration={max(int(round(duration_s)), 1)}"]


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


def run_with_tenant(p: FioGroupsParams, placement: Placement, timeout_s: float) -> WorkloadResult:
    """tenant=alone: db_bench only, in its group; tenant=beside: with the fio groups, same gate."""
    loaded = ensure_loaded(placement, timeout_s)
    argv = bench_argv(placement, p.runtime)
    if p.tenant == "beside":
        out = run_groups(p, placement, timeout_s, extra={"tenant": (argv, p.tenant_weight)})
        ex = out.result.raw["extra"]["tenant"]
        if ex["returncode"] != 0:
            raise TrialFailed(f"db_bench exited {ex['returncode']}: {ex['stdout'][-400:]}")
        out.result.metrics.update(parse(ex["stdout"]))
        out.result.job_text += "\n# tenant: " + " ".join(argv)
        out.result.manifest["tenant_db"] = loaded
        return out.result
    return _alone(p, placement, argv, timeout_s, loaded)


def _alone(p: FioGroupsParams, placement: Placement, argv: list[str], timeout_s: float,
           loaded: dict[str, Any]) -> WorkloadResult:
    wg = placement.require_weighted_groups()
    group = wg.create_group(f"t{int(time.time() * 1000) % 100000:05d}-tenant", p.tenant_weight)
    try:
        before = wg.read_counters(group)
        res = placement.executor.run(ExecRequest(argv=argv, timeout_s=timeout_s, cgroup_procs=[wg.procs_file(group)]))
        after = wg.read_counters(group)
    finally:
        errors = wg.remove_groups([group])
    if res.returncode != 0:
        raise TrialFailed(f"db_bench exited {res.returncode}: {res.tail()}")
    if errors:
        raise TrialFailed("could not remove the tenant's group: " + "; ".join(errors))
    metrics: dict[str, Any] = parse(res.stdout)
    metrics["tenant_iops_kernel"] = (after - before).ios / max(res.wall_s, 1e-9)
    return WorkloadResult(metrics=metrics, raw={"stdout": res.stdout[-20000:]}, job_text=" ".join(argv),
                          manifest={"trial": {"tenant_weight": group.weight}, "tenant_db": loaded})

"""A tenant of fio-groups (groups/tenant.py): YCSB workload A on RocksDB, as R4 ran it (exp. 2).

The real YCSB 0.17.0 client and iolab's RocksDB binding (workloads/ycsb.py, native/ycsb_build.py),
core workload A (read 0.5, update 0.5, zipfian, YCSB's own workloads/workloada values). Each trial:

1. `prepare` loads a fresh database (`-load`, RECORDS records of 10 x 100 bytes, YCSB's default
   record) in the trial's own cgroup, outside any weighted group, then syncs the filesystem so the
   load's dirty pages are not written back inside the measurement. Fresh per trial, not once per
   target: workload A's run updates (about 25 MB per 10 s trial here against a 128 MB database),
   so a reused database would grow a different LSM tree every trial (more versions, other
   compactions) and the alone and beside trials, interleaved, would not measure alike. The load
   costs ~5 s a trial (measured: 100 000 records in 4.6 s, the sync 0.04 s).
2. The run phase (`-t`, maxexecutiontime = runtime) goes in the tenant's weighted group, alone or
   released at the gate with the groups. A JVM needs START_S after release before its timed run
   begins: the groups' runtime is stretched by that, and their window cut to where YCSB did I/O.
3. What YCSB printed is judged as the `ycsb` workload judges it (workloads/ycsb.py `judge`: a Java
   exception, no [OVERALL], counts that disagree with the throughput, no operation done fail the
   trial) and becomes tenant_* metrics: ops/s, and per operation type (read, update) the mean,
   p50, p95, p99, max latency and the count, all YCSB's own (HdrHistogram). Failed operations are
   counted (`tenant_errors`) and flagged (`ycsb_failed_operations`), as the workload flags them.
4. `finish` removes the database (only a directory holding ycsb.py's marker).

Affordable on 2 cores: one client thread (YCSB's default, so R4's too unless it said otherwise),
a 256 MiB fixed heap, direct reads and RocksDB's default 8 MiB block cache so reads reach the
device the groups compete for; the JVM then keeps about one core busy, the other is left to the
fio groups and the loop device's workers.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult
from iolab.core.metrics import Metric
from iolab.native import ycsb_build
from iolab.targets.base import Placement
from iolab.workloads import ycsb
from iolab.workloads.groups.params import FioGroupsParams
from iolab.workloads.groups.tenant import TenantApp

RECORDS = 100_000  # x 1 KB: a 128 MB database, 16x the block cache
THREADS = 1
HEAP = 256 << 20
BLOCK_CACHE = 8 << 20
START_S = 3.0  # JVM start and RocksDB open after release (0.3 s idle, ~1-2 s on a busy 2-core machine)
PROPERTIES = "tenant.properties"  # inside the database's home directory

_OP = "{op:" + "|".join(ycsb.OPS.values()) + "}"
# What result() produces besides the names every tenant shares (groups/tenant.py METRICS).
TENANT_METRICS: tuple[Metric, ...] = (
    Metric("tenant_runtime_s", "s", "neither", "the YCSB tenant's run phase as YCSB timed it"),
    Metric("tenant_operations", "operations", "neither", "operations the YCSB tenant did, failed ones included"),
    Metric("tenant_errors", "operations", "lower", "the YCSB tenant's operations whose status was not OK"),
    Metric("tenant_gc_percent", "%", "lower", "share of the YCSB tenant's run the JVM spent in garbage collection"),
    Metric(f"tenant_{_OP}_ops", "operations", "neither", "the YCSB tenant's operations of one type"),
    Metric(f"tenant_{_OP}_errors", "operations", "lower", "the YCSB tenant's failed operations of one type"),
)


def workload(p: FioGroupsParams) -> ycsb.YcsbWorkload:
    """The `ycsb` workload's own parameters for the tenant (validated by YcsbParams as any spec's)."""
    return ycsb.YcsbWorkload(ycsb.YcsbParams(
        core_workload="a", recordcount=RECORDS, maxexecutiontime=max(math.ceil(p.runtime), 1), threads=THREADS,
        use_direct_reads=True, block_cache=BLOCK_CACHE, heap=HEAP))


def _home(placement: Placement) -> Path:
    if placement.executor.name != "host" or not placement.directory:
        raise TrialFailed("the YCSB tenant runs on the host, beside the weighted groups, in a directory of the "
                          "target's filesystem; this target offers none")
    return Path(placement.directory) / ycsb.DB_DIR


def prepare(p: FioGroupsParams, placement: Placement, timeout_s: float) -> dict[str, Any]:
    """A fresh database, loaded and synced; its facts for the trial's manifest (`tenant_db`)."""
    w = workload(p)
    build = ycsb_build.installed()
    home = Path(ycsb.fresh_dir(placement.executor, str(_home(placement).parent), timeout_s))
    props = home / PROPERTIES
    props.write_text(w.properties(str(home / "db")))
    t0 = time.monotonic()
    res = placement.executor.run(ExecRequest(argv=_argv(w, build.command(), "load", props), timeout_s=timeout_s))
    parsed = ycsb.judge("load", res, RECORDS)
    load_s = time.monotonic() - t0
    sync = placement.executor.run(ExecRequest(argv=["sync", "-f", str(home)], timeout_s=max(timeout_s - load_s, 10)))
    if sync.returncode != 0:
        raise TrialFailed(f"sync -f {home} failed ({sync.returncode}): {sync.tail()}")
    m = ycsb.phase_metrics("load", parsed)
    return {"app": "ycsb", "core_workload": "a", "records": RECORDS, "record_bytes": w.params.record_bytes(),
            "dir": str(home / "db"), "load_s": round(load_s, 2), "sync_s": round(sync.wall_s, 2),
            "load_ops_s": round(m["load_ops_s"], 1), "properties": props.read_text(),
            "ycsb_build": build.facts}


def _argv(w: ycsb.YcsbWorkload, cmd: ycsb_build.JavaCommand, phase: str, props: Path) -> list[str]:
    """ycsb.py's command line, with the properties file at its absolute place (the executor's work
    directory is not where it was written)."""
    return [str(props) if a == "workload.properties" else a for a in w.argv(cmd, phase)]


def run_argv(p: FioGroupsParams, placement: Placement) -> list[str]:
    return _argv(workload(p), ycsb_build.installed().command(), "run", _home(placement) / PROPERTIES)


def result(res: ExecResult) -> tuple[dict[str, float], list[str]]:
    """YCSB's run phase judged as the `ycsb` workload judges it, as tenant_* metrics and its flags."""
    parsed = ycsb.judge("run", res, None)  # time-bound: any positive count of operations
    metrics = {"tenant_" + k.removeprefix("run_"): v for k, v in ycsb.phase_metrics("run", parsed).items()
               if k != "run_verify_errors"}  # no dataintegrity in the tenant
    return metrics, ycsb.phase_flags("run", parsed, res)


def finish(placement: Placement) -> None:
    if placement.directory:
        ycsb.remove_own(placement.executor, f"{placement.directory.rstrip('/')}/{ycsb.DB_DIR}")


APP = TenantApp("ycsb", "YCSB workload A on RocksDB", TENANT_METRICS, prepare=prepare, argv=run_argv, result=result,
                finish=finish, start_s=START_S, prepare_s=12.0,
                touches=f"a RocksDB database of {RECORDS} YCSB records in {ycsb.DB_DIR}/ on the target's ext4, loaded "
                        "fresh each trial (YCSB 0.17.0 workload A) and removed after it")

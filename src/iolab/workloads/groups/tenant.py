"""The tenant of a fio-groups trial: a real application in its own weighted group (R4, exp. 2).

A tenant application is one small table of operations (`TenantApp`); workloads/fio_groups.py
names the applications (`TENANT_APPS`: RocksDB's db_bench, YCSB workload A on RocksDB) and
this module runs whichever the trial asks for, the same way for each:

1. `prepare`: what the application needs before it is timed (db_bench: a database loaded once
   per target; YCSB: a database loaded fresh for this trial), in the trial's own cgroup, never
   in a weighted group; its facts become the trial's `tenant_db` manifest entry.
2. alone: the application by itself in a group of `tenant_weight`; beside: released at the same
   gate as the fio groups, in its own group (groups/run.py), the groups' window cut to where it
   did I/O too, and the groups' fio runtime stretched by `start_s` so the application's timed
   run ends while they still run.
3. `result`: judge what the application printed and turn it into `tenant_*` metrics and flags
   (a failed application fails the trial, as its own workload would).
4. `finish`: always, after the run (YCSB removes its database).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iolab.core.errors import TrialFailed
from iolab.core.exec import ExecRequest, ExecResult
from iolab.core.metrics import Metric
from iolab.targets.base import Placement
from iolab.workloads.base import WorkloadResult
from iolab.workloads.groups.params import FioGroupsParams
from iolab.workloads.groups.run import run_groups


@dataclass(frozen=True)
class TenantApp:
    name: str  # the value of `tenant_app`
    title: str  # what the report calls it
    metrics: tuple[Metric, ...]  # the tenant_* metrics `result` can produce (declared on fio-groups)
    prepare: Callable[[FioGroupsParams, Placement, float], dict[str, Any]]  # -> the load's facts
    argv: Callable[[FioGroupsParams, Placement], list[str]]  # the timed run, `runtime` seconds
    result: Callable[[ExecResult], tuple[dict[str, float], list[str]]]  # -> (metrics, flags) or TrialFailed
    finish: Callable[[Placement], None] = lambda placement: None
    touches: str = ""  # what it writes on the target, for --dry-run
    start_s: float = 0.0  # seconds after release before its timed run begins (a JVM's start)
    prepare_s: float = 0.0  # expected seconds of `prepare` per trial (the estimate)


_OP = "{op:read|write|update|insert|scan|read_modify_write|delete}"
# What every tenant application reports under the same names (declared on fio-groups with each
# application's own `metrics`): the analysis compares them alone against beside.
METRICS: tuple[Metric, ...] = (
    Metric("tenant_ops_s", "ops/s", "higher",
           "the tenant application's operations per second (db_bench's ops/sec, YCSB's run-phase throughput)"),
    Metric(f"tenant_{_OP}_mean_us", "µs", "lower", "the tenant's mean latency of one operation type"),
    Metric(f"tenant_{_OP}_p50_us", "µs", "lower", "the tenant's median latency of one operation type"),
    Metric(f"tenant_{_OP}_p95_us", "µs", "lower", "the tenant's 95th-percentile latency of one operation type"),
    Metric(f"tenant_{_OP}_p99_us", "µs", "lower", "the tenant's 99th-percentile latency of one operation type"),
    Metric(f"tenant_{_OP}_max_us", "µs", "lower", "the tenant's slowest operation of one type"),
    Metric("tenant_iops_kernel", "IOPS", "higher",
           "the tenant group's IOPS from kernel counters: beside the groups over the window both did I/O in, "
           "alone over the application's own timed run"),
)


def run(app: TenantApp, p: FioGroupsParams, placement: Placement, timeout_s: float) -> WorkloadResult:
    """tenant=alone: the application only, in its group; tenant=beside: with the fio groups, same gate."""
    deadline = time.monotonic() + timeout_s
    try:
        loaded = app.prepare(p, placement, timeout_s)
        argv = app.argv(p, placement)
        left = max(deadline - time.monotonic(), 1.0)
        if p.tenant == "beside":
            out = run_groups(p, placement, left, extra={"tenant": (argv, p.tenant_weight)}, extra_start_s=app.start_s)
            metrics, flags = app.result(out.extra_results["tenant"])
            result = out.result
            result.metrics.update(metrics)
            result.flags += flags
            result.job_text += "\n# tenant: " + " ".join(argv)
        else:
            result = _alone(app, p, placement, argv, left)
        result.manifest["tenant_db"] = loaded
        result.manifest["tenant_app"] = app.name
        return result
    finally:
        app.finish(placement)


def _alone(app: TenantApp, p: FioGroupsParams, placement: Placement, argv: list[str],
           timeout_s: float) -> WorkloadResult:
    wg = placement.require_weighted_groups()
    group = wg.create_group(f"t{int(time.time() * 1000) % 100000:05d}-tenant", p.tenant_weight)
    try:
        before = wg.read_counters(group)
        res = placement.executor.run(ExecRequest(argv=argv, timeout_s=timeout_s, cgroup_procs=[wg.procs_file(group)]))
        after = wg.read_counters(group)
    finally:
        errors = wg.remove_groups([group])
    metrics, flags = app.result(res)
    if errors:
        raise TrialFailed("could not remove the tenant's group: " + "; ".join(errors))
    seconds = metrics.get("tenant_runtime_s") or res.wall_s  # the application's own timing, if it has one
    metrics["tenant_iops_kernel"] = (after - before).ios / max(seconds, 1e-9)
    return WorkloadResult(metrics=metrics, raw={"stdout": res.stdout[-20000:], "stderr": res.stderr[-4000:]},
                          job_text=" ".join(argv), flags=flags, manifest={"trial": {"tenant_weight": group.weight}})

"""Workload `fio-groups`: N fio processes, one per weighted cgroup, released together.

Optionally a real application (RocksDB db_bench) runs in its own weighted group, alone or
beside the groups (workloads/db_bench.py). The parts live in workloads/groups/: the
parameters, the start gate, CPU accounting, steady-state statistics, the trial's flags
and the orchestration of one trial. This module is what the registry names: the metric
declarations and the choice between groups only and groups with the tenant.
"""

from __future__ import annotations

from typing import ClassVar

from iolab.core.metrics import Metric
from iolab.targets.base import Placement
from iolab.workloads import db_bench
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult
from iolab.workloads.groups.params import FioGroupsParams
from iolab.workloads.groups.run import run_groups

__all__ = ["FioGroupsParams", "FioGroupsWorkload"]


class FioGroupsWorkload(Workload):
    kind: ClassVar[str] = "fio-groups"
    Params: ClassVar[type[WorkloadParams]] = FioGroupsParams
    main_metric = "ratio_800"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("aggregate_iops", "IOPS", "higher", "all groups together, kernel counters over the steady window"),
        Metric("class_iops_{weight:int}", "IOPS", "neither", "mean IOPS of one group of a weight class"),
        Metric("ratio_{weight:int}", "ratio", "neither",
               "a weight class's IOPS over the lightest class's (the ideal is the weight ratio)"),
        Metric("max_abs_log2_error", "log2", "lower", "worst group's |log2(share / entitled share)|"),
        Metric("class_max_abs_log2_error", "log2", "lower", "worst weight class's |log2(share / entitled share)|"),
        Metric("min_share", "fraction", "higher", "smallest group's share as a fraction of its entitlement"),
        Metric("jain", "index", "higher", "Jain's fairness index of weight-normalised throughput (1 = fair)"),
        Metric("min_group_ios", "I/Os", "neither", "I/Os of the group that completed fewest in the window"),
        Metric("groups", "groups", "neither", "weighted groups in the trial"),
        Metric("window_s", "s", "neither", "length of the steady window the shares are measured over"),
        Metric("warmup_cut_s", "s", "neither", "seconds cut at the start of the common run as warm-up"),
        Metric("start_spread_s", "s", "lower", "seconds from release until every group was running"),
        Metric("steady_drift", "fraction", "lower", "largest drift of a class share over the window"),
        Metric("generator_cpu_busy", "fraction", "neither",
               "fio's CPU time in the window as a fraction of all CPUs (not cores, unlike the runner's)"),
        Metric("machine_cpu_busy", "fraction", "neither", "whole machine's CPU busy fraction in the window"),
        Metric("generator_cpu_busy_lifetime", "fraction", "neither",
               "fio's CPU over its whole life as a fraction of all CPUs"),
        Metric("kernel_vs_fio", "ratio", "neither", "I/Os the kernel counted / I/Os fio reported (should be 1)"),
        Metric("kernel_vs_fio_worst_group", "fraction", "lower", "worst group's |kernel/fio - 1|"),
        Metric("fio_iops_total", "IOPS", "higher", "sum of every group's IOPS as fio reports them"),
        Metric("{side:read|write}_bytes", "bytes", "neither", "bytes all groups moved in one direction (fio)"),
        Metric("iodepth_total", "requests", "neither", "iodepth x groups: requests the generators keep in flight"),
        Metric("{side:read|write}_clat_p99_us_worst_group", "µs", "lower",
               "the worst group's 99th-percentile completion latency"),
        Metric("{name:word}_iops_kernel", "IOPS", "higher",
               "a named extra process's IOPS (e.g. the tenant), kernel counters over the window"),
        Metric("nr_requests", "requests", "neither", "the device queue's scheduler tag limit"),
        Metric("tag_limit_min", "requests", "neither", "BFQ's smallest per-group request limit under tag pressure"),
        Metric("groups_create_s", "s", "lower", "time to create the trial's groups"),
        *db_bench.TENANT_METRICS,
    )
    params: FioGroupsParams

    def __init__(self, params: WorkloadParams):
        super().__init__(params)
        # adaptive stopping watches the tenant's own rate when there are no groups to compare
        self.main_metric = "tenant_ops_s" if self.params.tenant == "alone" else "ratio_800"

    def estimate_seconds(self) -> float:
        p = self.params
        start = (0.05 + p.start_allowance) * p.groups + 1  # fork, join, gate, fio start-up
        tenant = p.runtime + 2 if p.tenant != "off" else 0
        return (p.runtime + start if p.groups else 0) + tenant + 1

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        if self.params.tenant != "off":
            return db_bench.run_with_tenant(self.params, placement, timeout_s)
        return run_groups(self.params, placement, timeout_s).result

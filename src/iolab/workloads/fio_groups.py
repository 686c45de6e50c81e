"""Workload `fio-groups`: N fio processes, one per weighted cgroup, released together.

Optionally a real application runs in its own weighted group, alone or beside the groups
(workloads/groups/tenant.py): `tenant_app` picks it from TENANT_APPS, RocksDB db_bench
(workloads/db_bench.py, the default) or YCSB workload A on RocksDB (workloads/ycsb_tenant.py,
R4's). The parts live in workloads/groups/: the parameters, the start gate, CPU accounting,
steady-state statistics, the trial's flags, the orchestration of one trial and of its tenant.
This module is what the registry names: the metric declarations, the table of tenant
applications and the choice between groups only and groups with the tenant.
"""

from __future__ import annotations

from typing import Any, ClassVar

from iolab.core.metrics import NONNEG, Metric
from iolab.native import ycsb_build
from iolab.targets.base import Needs, Placement
from iolab.workloads import db_bench, ycsb_tenant
from iolab.workloads.base import Workload, WorkloadParams, WorkloadResult
from iolab.workloads.groups import tenant
from iolab.workloads.groups.params import FioGroupsParams
from iolab.workloads.groups.run import run_groups

__all__ = ["TENANT_APPS", "FioGroupsParams", "FioGroupsWorkload"]

# The tenant applications, by the value of `tenant_app`: each one table of operations.
TENANT_APPS: dict[str, tenant.TenantApp] = {app.name: app for app in (db_bench.APP, ycsb_tenant.APP)}


class FioGroupsWorkload(Workload):
    kind: ClassVar[str] = "fio-groups"
    Params: ClassVar[type[WorkloadParams]] = FioGroupsParams
    main_metric = "ratio_800"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("aggregate_iops", "IOPS", "higher", "all groups together, kernel counters over the steady window"),
        Metric("class_iops_{weight:int}", "IOPS", "neither", "mean IOPS of one group of a weight class"),
        Metric("ratio_{weight:int}", "ratio", "neither",
               "a weight class's IOPS over the lightest class's (the ideal is the weight ratio)"),
        Metric("max_abs_log2_error", "log2", "lower", "worst group's |log2(share / entitled share)|", domain=NONNEG),
        Metric("class_max_abs_log2_error", "log2", "lower", "worst weight class's |log2(share / entitled share)|",
               domain=NONNEG),
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
        Metric("kernel_vs_fio_worst_group", "fraction", "lower", "worst group's |kernel/fio - 1|", domain=NONNEG),
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
        *tenant.METRICS,
        *(m for app in TENANT_APPS.values() for m in app.metrics),
    )
    params: FioGroupsParams

    def __init__(self, params: WorkloadParams):
        super().__init__(params)
        # adaptive stopping watches the tenant's own rate when there are no groups to compare
        self.main_metric = "tenant_ops_s" if self.params.tenant == "alone" else "ratio_800"
        if self.params.tenant != "off" and self.params.tenant_app == "ycsb":
            # as the ycsb workload: no java or no built jars is told before anything is created
            ycsb_build.installed()

    @property
    def app(self) -> tenant.TenantApp | None:
        return TENANT_APPS[self.params.tenant_app] if self.params.tenant != "off" else None

    @classmethod
    def needs(cls, workload: dict[str, Any]) -> Needs:
        """Weighted groups on the target's device; a tenant application also a directory beside
        the groups' file or device (the YCSB tenant with room for its records)."""
        p = FioGroupsParams(**workload)
        why = {"capability:weighted_groups": "each group of fio processes runs in a weighted cgroup of its own"}
        if p.tenant == "off":
            return Needs(storage=frozenset({"file", "block_device"}), apps=frozenset({"fio"}),
                         capabilities=frozenset({"weighted_groups"}), why=why)
        app = TENANT_APPS[p.tenant_app]
        need = 2 * ycsb_tenant.RECORDS * 1000 if p.tenant_app == "ycsb" else 0  # RocksDB: about twice the records
        return Needs(storage=frozenset({"directory"}), capacity=need, apps=frozenset({"fio", p.tenant_app}),
                     capabilities=frozenset({"weighted_groups"}),
                     why={**why, "storage": f"the tenant ({app.title}) keeps its database in a directory",
                          "capacity": f"the {p.tenant_app} tenant's {ycsb_tenant.RECORDS} records beside the groups' "
                                      "data file"})

    def touches(self) -> list[str]:
        """For --dry-run: the tenant application and what it writes."""
        app, p = self.app, self.params
        if not app:
            return []
        return [f"runs the tenant {app.title} (tenant_app = \"{app.name}\") in its own cgroup of weight "
                f"{p.tenant_weight}, {'without' if p.tenant == 'alone' else 'beside'} the groups; "
                f"it writes {app.touches}"]

    def estimate_seconds(self) -> float:
        p = self.params
        start = (0.05 + p.start_allowance) * p.groups + 1  # fork, join, gate, fio start-up
        app = self.app
        extra = (app.start_s + app.prepare_s + p.runtime + 2) if app else 0
        return (p.runtime + start if p.groups else 0) + extra + 1

    def run(self, placement: Placement, timeout_s: float) -> WorkloadResult:
        if self.app:
            return tenant.run(self.app, self.params, placement, timeout_s)
        return run_groups(self.params, placement, timeout_s).result

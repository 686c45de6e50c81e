"""cgroup-weights' spec: fio groups weighted 100/200/400/800 as N grows, under BFQ and under
`none` (the negative control); the full study adds an iodepth-1 diagnostic and, as R4 did, YCSB
workload A on RocksDB as a tenant, alone and beside the groups (`tenant_app = "db_bench"`
in a copy of the spec runs RocksDB's db_bench instead)."""

from __future__ import annotations

from typing import Any

NAME = "cgroup-weights"
SUMMARY = "R4: cgroup I/O weights 100/200/400/800 with N = 4..128 groups, BFQ vs none; break point and why"
QUICK_N = [4]
FULL_N = [4, 8, 16, 32, 64, 128]
TENANT_APP = "ycsb"  # R4 exp. 2: YCSB workload A on RocksDB beside the groups
DEPTH1_N = [8, 32, 128]  # the diagnostic: same N with iodepth 1, so N x iodepth stays below nr_requests


def build(quick: bool) -> dict[str, Any]:
    sweep = {"name": "sweep", "kind": "fio-groups", "groups": QUICK_N if quick else FULL_N, "rw": "randread",
             "runtime": 8 if quick else 10, "warmup": 1}
    study = {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 5,
             "ci_target": 0.1, "description": SUMMARY}  # metric: ratio_800 (tenant alone: its ops/s)
    if quick:
        return {"study": study, "target": {"kind": "cgroups", "controller": ["bfq", "none"], "size": "1G"},
                "workload": sweep}
    return {"study": study,
            "target": {"kind": "cgroups", "controller": ["bfq", "none"], "size": "1G", "filesystem": "ext4",
                       "data_size": "512M"},
            "workloads": [sweep,
                          {"name": "depth1", "kind": "fio-groups", "groups": DEPTH1_N, "iodepth": 1,
                           "rw": "randread", "runtime": 10, "warmup": 1},
                          {"name": "tenant-alone", "kind": "fio-groups", "groups": 0, "tenant": "alone",
                           "tenant_app": TENANT_APP, "runtime": 10},
                          {"name": "tenant-beside", "kind": "fio-groups", "groups": 4, "tenant": "beside",
                           "tenant_app": TENANT_APP, "runtime": 10, "warmup": 1}]}

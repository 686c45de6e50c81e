"""sync-amplification's spec: a guest's known number of durable 64 KiB writes per pattern, on
raw and qcow2 images (and, in the full study, every qcow2 option and cache/aio mode that
changes the count), on the raw guest disk and in a guest ext4; the syscall and guest block
tracepoint probes on.

Then what the syncs cost (R3's applications): on the guest ext4 of the configurations that
keep or remove qcow2's ordering syncs, each application workload of APPS runs again with
no costly probe (`probes = []`: strace on QEMU would slow exactly the syncs being priced).
"""

from __future__ import annotations

from typing import Any

NAME = "sync-amplification"
SUMMARY = ("R3: host syncs and device flushes per guest data sync, raw vs qcow2 (+options), "
           "append/overwrite/sequential")
OPTION_KEYS = ("cluster_size", "preallocation", "lazy_refcounts", "cache", "aio", "bus")
DEFAULTS = {"bus": "virtio-blk", "cache": "none", "aio": "threads", "cluster_size": None,
            "preallocation": "off", "lazy_refcounts": False}
PATTERNS = ("append", "overwrite", "sequential", "sequential-overwrite")
PATTERNS_QUICK = ("append", "overwrite", "sequential")
COUNT_WORKLOAD = "count"  # the workload table whose trials are counted (probes on)

# R3's applications, each as iolab runs it, with R3's published change of barrier QEMU over
# stock QEMU (throughput, %). `quick`: part of the quick study; the others say why not.
FULL_ONLY = "run by the full study only"
YCSB_FULL_ONLY = (f"{FULL_ONLY}: YCSB's Java client runs in the guest (guest_apps = [\"ycsb\"]), and under TCG a "
                  "JVM start alone takes ~12 s")
APPS: dict[str, dict[str, Any]] = {
    "dd-append": {"r3": "dd append", "r3_gain_pct": 81.1, "quick": True,
                  "workload": {"kind": "sync-writes", "pattern": "sequential"}},
    "dd-overwrite": {"r3": "dd overwrite", "r3_gain_pct": 4.5, "quick": True,
                     "workload": {"kind": "sync-writes", "pattern": "sequential-overwrite"}},
    "mobibench-append": {"r3": "Mobibench append", "r3_gain_pct": 4.7, "quick": False, "why_not_quick": FULL_ONLY,
                         "workload": {"kind": "sync-writes", "pattern": "append"}},
    "mobibench-overwrite": {"r3": "Mobibench overwrite", "r3_gain_pct": -2.7, "quick": False,
                            "why_not_quick": FULL_ONLY, "workload": {"kind": "sync-writes", "pattern": "overwrite"}},
    "varmail": {"r3": "Filebench varmail", "r3_gain_pct": 9.2, "quick": True,
                "workload": {"kind": "varmail", "iosize": "64k"}},
    # R3: YCSB on Cassandra, insert-only and update-only, 64 KB records; here YCSB's own client on
    # RocksDB (workloads/ycsb.py), whose WAL is not synced per write, as Cassandra's periodic commit log
    "ycsb-insert": {"r3": "YCSB insert", "r3_gain_pct": 3.3, "quick": False, "why_not_quick": YCSB_FULL_ONLY,
                    "workload": {"kind": "ycsb", "readproportion": 0.0, "updateproportion": 0.0,
                                 "insertproportion": 1.0}},
    "ycsb-update": {"r3": "YCSB update", "r3_gain_pct": 0.6, "quick": False, "why_not_quick": YCSB_FULL_ONLY,
                    "workload": {"kind": "ycsb", "readproportion": 0.0, "updateproportion": 1.0}},
}
YCSB_RECORDS = 1000  # 64 MiB of 64 KiB records loaded, then 1000 operations of 64 KiB, per trial
YCSB_MEMORY = "1G"  # the cost configurations' guests in the full study: a 256 MiB heap beside Java and RocksDB
# The configurations that remove qcow2's ordering syncs play R3's barrier QEMU; default qcow2
# plays stock QEMU. (name of the target variant, as in build()) -> the role it plays.
COST_VARIANTS = ("qcow2", "raw", "qcow2-lazy", "qcow2-prealloc-metadata", "qcow2-prealloc-falloc")
COST_BASELINE = "qcow2"


def build(quick: bool) -> dict[str, Any]:
    count = 64 if quick else 256
    base = {"kind": "qemu", "bus": "virtio-blk", "cache": "none", "aio": "threads", "preallocation": "off",
            "lazy_refcounts": False, "disk_size": "256M" if quick else "1G", "memory": "512M",
            "prefill": False, "accel": "auto"}
    targets = []
    variants: list[tuple[str, dict[str, Any]]] = [("raw", {"format": "raw"}), ("qcow2", {"format": "qcow2"})]
    if not quick:
        variants += [
            ("qcow2-lazy", {"format": "qcow2", "lazy_refcounts": True}),
            ("qcow2-prealloc-metadata", {"format": "qcow2", "preallocation": "metadata"}),
            ("qcow2-prealloc-falloc", {"format": "qcow2", "preallocation": "falloc"}),
            ("qcow2-prealloc-full", {"format": "qcow2", "preallocation": "full"}),
            ("qcow2-cluster-64k", {"format": "qcow2", "cluster_size": "64k"}),
            ("qcow2-cluster-1M", {"format": "qcow2", "cluster_size": "1M"}),
            ("qcow2-writeback", {"format": "qcow2", "cache": "writeback"}),
            ("qcow2-unsafe", {"format": "qcow2", "cache": "unsafe"}),
            ("qcow2-directsync", {"format": "qcow2", "cache": "directsync"}),
            ("qcow2-native", {"format": "qcow2", "aio": "native"}),
            ("qcow2-io_uring", {"format": "qcow2", "aio": "io_uring"}),
            ("raw-native", {"format": "raw", "aio": "native"}),
            ("raw-io_uring", {"format": "raw", "aio": "io_uring"}),
        ]
    for name, extra in variants:
        for fs in ("none", "ext4"):
            apps: dict[str, Any] = {}
            if fs == "ext4" and name in COST_VARIANTS:
                apps = {"native_helpers": ["iolab_varmail"]}
                if not quick:  # YCSB in the guest: its Java runtime in the initramfs, memory for its heap
                    apps.update(guest_apps=["ycsb"], memory=YCSB_MEMORY)
            targets.append(dict(base, **extra, **apps, name=f"{name}/{fs}", guest_fs=fs))
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 5,
                  "ci_target": 0.1, "description": SUMMARY, "probes": ["qemu_syscalls", "guest_blocktrace"]},
        "targets": targets,
        "workloads": [{"name": COUNT_WORKLOAD, "kind": "sync-writes",
                       "pattern": list(PATTERNS_QUICK if quick else PATTERNS), "bs": "64k", "count": count},
                      *cost_workloads(quick, [t["name"] for t in targets])],
    }


def cost_workloads(quick: bool, target_names: list[str]) -> list[dict[str, Any]]:
    """APPS on the guest ext4 of COST_VARIANTS, without costly probes.

    Sizes: 4x the counted writes per trial (a trial of seconds, not a fraction of one, under
    TCG too); the appends' files stay (each trial a new one), so 3 (quick) or 5 repetitions
    fit the guest disk. varmail keeps varmail.f's file set in the full study (R3 ran it for
    180 s; 60 s here) and a smaller one in the quick study. YCSB (full study): R3's 64 KB
    records, a fresh database of YCSB_RECORDS per trial, as many operations.
    """
    on = [f"{v}/ext4" for v in COST_VARIANTS if f"{v}/ext4" in target_names]
    writes = 256 if quick else 512
    out = []
    for name, app in APPS.items():
        if quick and not app["quick"]:
            continue
        w: dict[str, Any] = dict(app["workload"], name=name, targets=on, probes=[])
        if w["kind"] == "sync-writes":
            w.update(bs="64k", count=writes)
        elif w["kind"] == "ycsb":
            w.update(fieldcount=1, fieldlength="64k", recordcount=YCSB_RECORDS, operationcount=YCSB_RECORDS,
                     heap="256M")
        else:
            w.update(duration="4s" if quick else "60s", nfiles=200 if quick else 1000)
        out.append(w)
    return out

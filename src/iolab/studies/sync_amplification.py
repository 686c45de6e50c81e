"""Study sync-amplification (R3): every flush from a guest's fdatasync down to the host disk.

A guest makes a known number of 64 KiB write + fdatasync pairs (workload `sync-writes`,
append or overwrite, on the raw guest disk or a file in a guest ext4). Each trial counts
the same syncs at every layer (docs/studies/sync-amplification.md):

  guest fio (syncs)  ->  guest block layer (probe guest_disk: flushes, writes)
  ->  QEMU device (probe qmp_blockstats: flush_operations)
  ->  QEMU's host syscalls for the image (probe qemu_syscalls: fdatasync/fsync/pwrite*,
      plus io_uring flushes and qcow2 metadata trace events)
  ->  the host block device under the image (probe host_disk: writes, flushes)

Counts do not depend on CPU speed, so they hold under TCG; throughput does not.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import mean
from typing import Any

from iolab.analysis.stats import mean_ci
from iolab.report.model import Chart, Note, Section, Series, Table
from iolab.studies.common import fmt_est, ok_trials

NAME = "sync-amplification"
SUMMARY = "R3: host fdatasyncs and device flushes per guest fdatasync, raw vs qcow2 (+options), append/overwrite"
R3_CLAIM = 3.0  # "at least three host fdatasync() per guest fdatasync() on qcow2"
OPTION_KEYS = ("cluster_size", "preallocation", "lazy_refcounts", "cache", "aio", "bus")
DEFAULTS = {"bus": "virtio-blk", "cache": "none", "aio": "threads", "cluster_size": None,
            "preallocation": "off", "lazy_refcounts": False}

RECOMMENDATIONS = [
    ["raw format", "no metadata to order: ~1 host sync per guest sync",
     "no snapshots, backing files or thin provisioning (unless the file is sparse)"],
    ["qcow2 preallocation=metadata", "L2 tables exist up front: appends need no L2 allocation",
     "image creation writes all metadata; refcounts of data clusters still change on first write"],
    ["qcow2 preallocation=falloc/full", "clusters allocated up front: appends behave like overwrites",
     "the full virtual size is used on the host at once; full also writes it (slow creation)"],
    ["qcow2 lazy_refcounts=on", "refcount updates are not ordered by syncs (fewer flushes on allocation)",
     "after a crash the image is marked dirty and needs `qemu-img check -r all` (automatic on open)"],
    ["larger cluster_size (e.g. 1M)", "fewer allocations per byte appended, so fewer metadata syncs",
     "more space per allocation; copy-on-write of a partial cluster writes more"],
    ["cache=unsafe", "guest flushes are ignored: no host syncs at all",
     "DROPS DURABILITY: a host crash loses data the guest believed was on disk"],
    ["cache=writeback / none / directsync", "same sync count (flushes still pass through); "
     "directsync adds O_DSYNC to every write", "writeback uses host page cache (memory, double caching)"],
]


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
            ("raw-io_uring", {"format": "raw", "aio": "io_uring"}),
        ]
    for name, extra in variants:
        for fs in ("none", "ext4"):
            targets.append(dict(base, **extra, name=f"{name}/{fs}", guest_fs=fs))
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 5,
                  "ci_target": 0.1, "description": SUMMARY, "probes": ["qemu_syscalls"]},
        "targets": targets,
        "workload": {"kind": "sync-writes", "pattern": ["append", "overwrite"], "bs": "64k", "count": count},
    }


def before_group(runner: Any, target: Any, placement: Any, pending: list[Any]) -> None:
    """Write the overwrite region once, before any probe runs, so no trial counts the prefill."""
    from iolab.workloads.sync_writes import SyncWritesParams, prepare_overwrite

    done = set()
    for c in pending:
        w = dict(c.workload)
        if w.get("pattern") != "overwrite":
            continue
        p = SyncWritesParams(**w)
        if (p.bs, p.count) not in done:
            prepare_overwrite(placement, p)
            done.add((p.bs, p.count))


# ---------------------------------------------------------------- analysis

def _options(target: dict[str, Any]) -> dict[str, Any]:
    return {k: target.get(k, DEFAULTS[k]) for k in OPTION_KEYS}


def _key(t: dict[str, Any]) -> tuple:
    tg, w = t["params"]["_target"], t["params"]["_workload"]
    return (tg.get("format", "raw"), w.get("pattern"), tg.get("guest_fs", "none"),
            tuple(sorted(_options(tg).items(), key=lambda kv: kv[0])))


def trial_counts(t: dict[str, Any]) -> dict[str, float]:
    """One trial's counts at every layer (missing probes give None)."""
    m, pr = t["metrics"], t.get("probes") or {}
    g, q, s, h = pr.get("guest_disk") or {}, pr.get("qmp_blockstats") or {}, pr.get("qemu_syscalls") or {}, \
        pr.get("host_disk") or {}
    return {
        "guest_fdatasync": m.get("guest_syncs"),
        "guest_writes": m.get("guest_writes"),
        "guest_flushes": g.get("flushes"),
        "guest_block_writes": g.get("writes"),
        "qemu_flush_ops": q.get("flush_operations"),
        "qemu_write_ops": q.get("wr_operations"),
        "host_fdatasync": s.get("host_fdatasync_total"),
        "host_fdatasync_syscalls": s.get("host_fdatasync"),
        "host_fsync_syscalls": s.get("host_fsync"),
        "host_io_uring_flushes": s.get("io_uring_flushes"),
        "host_pwrite": s.get("host_pwrite"),
        "host_writes": h.get("writes"),
        "host_device_flushes": h.get("flushes"),
    }


def _avg(vals: list[float | None]) -> float | None:
    vals = [v for v in vals if v is not None]
    return float(mean(vals)) if vals else None


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    trials = [t for t in ok_trials(doc) if t["params"].get("_workload", {}).get("kind") == "sync-writes"]
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for t in trials:
        groups[_key(t)].append(t)
    accel = None
    for t in doc["trials"]:
        accel = accel or (t.get("manifest") or {}).get("target", {}).get("accel")
    amp, thr = [], []
    for (fmt, pattern, fs, opts), ts in sorted(groups.items(), key=lambda kv: str(kv[0])):
        per = [trial_counts(t) for t in ts]
        row: dict[str, Any] = {"format": fmt, "pattern": pattern, "guest_fs": fs, "options": dict(opts),
                               "trials": len(ts)}
        for k in per[0]:
            row[k] = _avg([p[k] for p in per])
        gs = row["guest_fdatasync"]
        row["factor_host_syncs"] = row["host_fdatasync"] / gs if gs and row["host_fdatasync"] is not None else None
        row["factor_device_flushes"] = (row["host_device_flushes"] / gs
                                        if gs and row["host_device_flushes"] is not None else None)
        row["factor_host_syncs_per_trial"] = [
            (p["host_fdatasync"] / p["guest_fdatasync"]) if p["guest_fdatasync"] and p["host_fdatasync"] is not None
            else None for p in per]
        causes: dict[str, Any] = {}
        for t in ts:
            for k, v in ((t.get("probes") or {}).get("qemu_syscalls") or {}).get("causes", {}).items():
                causes.setdefault(k, []).append(v)
        row["causes"] = {k: _avg(v) for k, v in causes.items()}
        row["io_uring_counted"] = all(((t.get("probes") or {}).get("qemu_syscalls") or {}).get("io_uring_counted",
                                                                                                False) for t in ts)
        row["flags"] = sorted({f for t in ts for f in (t.get("flags") or [])})
        amp.append(row)
        iops = [t["metrics"]["write_iops"] for t in ts if "write_iops" in t["metrics"]]
        thr.append({"format": fmt, "pattern": pattern, "guest_fs": fs, "options": dict(opts),
                    "syncs_per_s": mean_ci(iops).as_dict("writes+fdatasync/s") if iops else None,
                    "accel": accel, "tcg": accel == "tcg"})
    return {"accel": accel, "amplification": amp, "throughput": thr, "r3_claim_host_syncs_per_guest_sync": R3_CLAIM,
            "recommendations": [dict(zip(("configuration", "effect", "cost_or_risk"), r)) for r in RECOMMENDATIONS]}


# ---------------------------------------------------------------- report

def _label(r: dict[str, Any]) -> str:
    o = r["options"]
    extra = [f"{k}={v}" for k, v in o.items() if v != DEFAULTS[k] and v is not None]
    return f"{r['format']} {r['pattern']} fs={r['guest_fs']}" + (f" ({', '.join(extra)})" if extra else "")


def _n(v: Any, digits: int = 1) -> str:
    return "–" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) and v != int(v) else f"{int(v)}")


def present(doc: dict[str, Any], f: dict[str, Any]) -> tuple[list[str], list[Section]]:
    amp = f["amplification"]
    tcg = f.get("accel") == "tcg"
    summary = [f"accelerator: {f.get('accel') or 'n/a'}" + (" (counts hold; throughput is not representative)"
                                                          if tcg else "")]
    for r in amp:
        if r["factor_host_syncs"] is not None:
            summary.append(f"{_label(r)}: {r['factor_host_syncs']:.2f} host syncs and "
                           f"{(r['factor_device_flushes'] or 0):.2f} device flushes per guest fdatasync")
    layers = ["guest_fdatasync", "guest_flushes", "qemu_flush_ops", "host_fdatasync", "host_device_flushes"]
    labels = [_label(r) for r in amp]
    chart = Chart("Flushes per layer, per guest fdatasync (waterfall guest → QEMU → host syscalls → host device)",
                  "bar", "configuration", "count per guest fdatasync",
                  [Series(layer, labels, [(r[layer] / r["guest_fdatasync"]) if r[layer] is not None
                                          and r["guest_fdatasync"] else None for r in amp])
                   for layer in layers],
                  ref_lines=[(R3_CLAIM, "R3: ≥3 host syncs on qcow2"), (1.0, "1 per guest sync")])
    cols = ["configuration", "guest fdatasync", "guest flushes", "guest writes", "QEMU flush ops", "QEMU writes",
            "host fdatasync+fsync (+io_uring)", "host pwrite*", "host device writes", "host device flushes",
            "host syncs / guest sync", "device flushes / guest sync"]
    rows = [[_label(r), _n(r["guest_fdatasync"]), _n(r["guest_flushes"]), _n(r["guest_block_writes"]),
             _n(r["qemu_flush_ops"]), _n(r["qemu_write_ops"]), _n(r["host_fdatasync"]), _n(r["host_pwrite"]),
             _n(r["host_writes"]), _n(r["host_device_flushes"]), _n(r["factor_host_syncs"], 2),
             _n(r["factor_device_flushes"], 2)] for r in amp]
    notes = [Note("Counts are means over the repetitions of one trial (a fixed number of 64 KiB writes, each "
                  "followed by fdatasync; the last by fsync). Each column is explained in "
                  "docs/studies/sync-amplification.md.")]
    if any(not r.get("io_uring_counted") for r in amp):
        notes.append(Note("Some trials had no QEMU trace events: flushes submitted through io_uring "
                          "(aio=io_uring) are then NOT counted in the host sync column.", "warn"))
    table = Table("Counts per trial at every layer", cols, rows, notes=notes)
    cause_keys = sorted({k for r in amp for k in r["causes"]})
    cause_table = Table("qcow2 metadata work per trial (QEMU trace events): why the extra syncs happen",
                        ["configuration", *cause_keys], [[_label(r), *[_n(r["causes"].get(k)) for k in cause_keys]]
                                                         for r in amp])
    r3_rows = [[_label(r), f">= {R3_CLAIM:.0f}" if r["format"] == "qcow2" else "(1: no metadata)",
                _n(r["factor_host_syncs"], 2),
                "–" if r["factor_host_syncs"] is None or r["format"] != "qcow2" else
                ("yes" if r["factor_host_syncs"] >= R3_CLAIM else "no")] for r in amp]
    r3 = Table("R3's claim next to what was measured (host fdatasync per guest fdatasync)",
               ["configuration", "R3 (QEMU 2.1.2, Linux 3.10)", "measured", "claim holds here"], r3_rows,
               notes=[Note(f"Measured with {_qemu_version(doc)}; R3 used QEMU 2.1.2. Newer QEMU batches "
                           "metadata updates, so the claim is checked, not assumed.")])
    warn = [Note("Guests ran under TCG software emulation: throughput includes instruction emulation and is "
                 "NOT representative of KVM. The counts above do not depend on CPU speed.", "warn")] if tcg else []
    thr_rows = [[_label(r), fmt_est(r["syncs_per_s"])] for r in f["throughput"]]
    thr_table = Table("Write+fdatasync pairs per second (mean ± 95% CI)" + (" — TCG" if tcg else ""),
                      ["configuration", "syncs/s"], thr_rows, notes=warn)
    rec = Table("What cuts amplification, and what it costs", ["configuration", "effect", "cost or risk"],
                [[r["configuration"], r["effect"], r["cost_or_risk"]] for r in f["recommendations"]])
    return summary, [
        Section("Layer waterfall", [chart, table], intro=(
            "One guest fdatasync, followed down the stack: the guest block layer turns it into a write and a "
            "flush (more with ext4's journal), QEMU's device sees the flush, QEMU issues host syscalls for the "
            "image (qcow2 adds ordering syncs for its metadata), and the host device under the image flushes.")),
        Section("R3 claim", [r3]),
        Section("Causes", [cause_table]),
        Section("Throughput", [thr_table]),
        Section("Recommendations", [rec]),
    ]


def _qemu_version(doc: dict[str, Any]) -> str:
    for t in doc["trials"]:
        v = (t.get("manifest") or {}).get("target", {}).get("qemu_version")
        if v:
            return f"QEMU {v}" if not str(v).lower().startswith("qemu") else str(v)
    return "this host's QEMU"

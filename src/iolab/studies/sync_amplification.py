"""Study sync-amplification (R3): every flush from a guest's fdatasync down to the host disk.

A guest makes a known number of 64 KiB writes, each made durable (workload `sync-writes`:
write + fdatasync for append and overwrite, O_DSYNC writes for the dd-style sequential
pattern), on the raw guest disk or a file in a guest ext4. Each trial counts
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
from iolab.studies.common import fmt_est, ok_trials, size_label

NAME = "sync-amplification"
SUMMARY = ("R3: host syncs and device flushes per guest data sync, raw vs qcow2 (+options), "
           "append/overwrite/sequential")
R3_CLAIM = 3.0  # "at least three host fdatasync() per guest fdatasync() on qcow2"
OPTION_KEYS = ("cluster_size", "preallocation", "lazy_refcounts", "cache", "aio", "bus")
DEFAULTS = {"bus": "virtio-blk", "cache": "none", "aio": "threads", "cluster_size": None,
            "preallocation": "off", "lazy_refcounts": False}

PATTERNS = ("append", "overwrite", "sequential")
PATTERNS_QUICK = ("append", "overwrite", "sequential")

# One row per configuration that changes amplification. `pairs`: (variant, baseline) as
# (format, non-default options); the report shows the measured factor of the variant next
# to its baseline's for every pattern and guest fs the run measured both for.
RECOMMENDATIONS: list[dict[str, Any]] = [
    {"configuration": "raw format (instead of qcow2)", "pairs": [(("raw", {}), ("qcow2", {}))],
     "effect": "no metadata to order: one host sync per guest sync, also when appending",
     "cost_or_risk": "no snapshots, backing files or compression; thin only while the host file is sparse "
                     "(the host fs then allocates: extra device flushes on append)"},
    {"configuration": "qcow2 preallocation=metadata", "pairs": [(("qcow2", {"preallocation": "metadata"}), ("qcow2", {}))],
     "effect": "L2 tables and cluster offsets exist up front: no cluster allocation, so no ordering sync",
     "cost_or_risk": "image creation writes all metadata; the host file stays sparse, so the host fs still "
                     "allocates (device flushes) on first write"},
    {"configuration": "qcow2 preallocation=falloc", "pairs": [(("qcow2", {"preallocation": "falloc"}), ("qcow2", {}))],
     "effect": "clusters allocated up front (and the host file fallocated): appends behave like overwrites",
     "cost_or_risk": "the full virtual size is reserved on the host at once"},
    {"configuration": "qcow2 preallocation=full", "pairs": [(("qcow2", {"preallocation": "full"}), ("qcow2", {}))],
     "effect": "clusters allocated and written up front: appends behave like overwrites",
     "cost_or_risk": "the full virtual size is used and written at creation (slow to create)"},
    {"configuration": "qcow2 lazy_refcounts=on", "pairs": [(("qcow2", {"lazy_refcounts": True}), ("qcow2", {}))],
     "effect": "refcount updates are not ordered by a sync before the L2 update",
     "cost_or_risk": "after a crash the image is dirty and needs a refcount repair (qemu-img check -r all; "
                     "QEMU does it on open)"},
    {"configuration": "qcow2 cluster_size=1M", "pairs": [(("qcow2", {"cluster_size": 1 << 20}), ("qcow2", {}))],
     "effect": "one allocation per 1 MiB instead of per 64 KiB: 16x fewer ordering syncs when appending 64 KiB",
     "cost_or_risk": "more host space per allocation; a partial write to a new cluster writes more "
                     "(copy-on-write with backing files); fewer L2 entries per table"},
    {"configuration": "qcow2 cluster_size=64k (explicit)", "pairs": [(("qcow2", {"cluster_size": 64 << 10}), ("qcow2", {}))],
     "effect": "the default, named: must measure the same as plain qcow2 (a control)",
     "cost_or_risk": "none"},
    {"configuration": "cache=unsafe", "pairs": [(("qcow2", {"cache": "unsafe"}), ("qcow2", {}))],
     "effect": "guest flushes are ignored: no host syncs at all",
     "cost_or_risk": "DROPS DURABILITY: a host crash or power loss loses data the guest believed was on disk"},
    {"configuration": "cache=writeback", "pairs": [(("qcow2", {"cache": "writeback"}), ("qcow2", {}))],
     "effect": "guest flushes still reach the host: the same sync count as cache=none",
     "cost_or_risk": "image I/O goes through the host page cache (memory, double caching, less predictable latency)"},
    {"configuration": "cache=directsync", "pairs": [(("qcow2", {"cache": "directsync"}), ("qcow2", {}))],
     "effect": "the guest sees a write-through disk and sends no flushes; QEMU makes every write durable itself",
     "cost_or_risk": "a host sync per guest write, also for writes the guest never asked to sync"},
    {"configuration": "aio=native", "pairs": [(("qcow2", {"aio": "native"}), ("qcow2", {})),
                                             (("raw", {"aio": "native"}), ("raw", {}))],
     "effect": "Linux AIO for reads/writes; flushes still go to a thread's fdatasync: same sync count",
     "cost_or_risk": "needs cache.direct (cache=none/directsync)"},
    {"configuration": "aio=io_uring", "pairs": [(("qcow2", {"aio": "io_uring"}), ("qcow2", {})),
                                               (("raw", {"aio": "io_uring"}), ("raw", {}))],
     "effect": "flushes are submitted through the ring (IORING_OP_FSYNC): same sync count, no fdatasync syscall",
     "cost_or_risk": "a syscall trace alone sees none of these syncs (counted from QEMU trace events here)"},
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
            ("raw-native", {"format": "raw", "aio": "native"}),
            ("raw-io_uring", {"format": "raw", "aio": "io_uring"}),
        ]
    for name, extra in variants:
        for fs in ("none", "ext4"):
            targets.append(dict(base, **extra, name=f"{name}/{fs}", guest_fs=fs))
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 5,
                  "ci_target": 0.1, "description": SUMMARY, "probes": ["qemu_syscalls", "guest_blocktrace"]},
        "targets": targets,
        "workload": {"kind": "sync-writes", "pattern": list(PATTERNS_QUICK if quick else PATTERNS), "bs": "64k",
                     "count": count},
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

LAYERS = (  # (field, name in the waterfall): one guest data sync followed down the stack
    ("guest_fdatasync", "guest data syncs"),
    ("guest_flushes", "guest block-layer flushes"),
    ("qemu_flush_ops", "QEMU device flushes"),
    ("host_fdatasync", "host syncs (syscalls + io_uring)"),
    ("host_device_flushes", "host device flushes"),
)


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
    b = pr.get("guest_blocktrace") or {}
    return {
        "guest_fdatasync": m.get("guest_syncs"),
        "guest_dsync_writes": m.get("guest_dsync_writes"),
        "guest_writes": m.get("guest_writes"),
        "guest_flushes": g.get("flushes"),
        "guest_block_writes": g.get("writes"),
        "guest_write_requests": b.get("writes"),
        "guest_fua_writes": b.get("fua_writes"),
        "guest_trace_flushes": b.get("flushes"),
        "qemu_flush_ops": q.get("flush_operations"),
        "qemu_write_ops": q.get("wr_operations"),
        "host_fdatasync": s.get("host_fdatasync_total"),
        "host_fdatasync_syscalls": s.get("host_fdatasync"),
        "host_fsync_syscalls": s.get("host_fsync"),
        "host_io_uring_flushes": s.get("io_uring_flushes"),
        "host_pwrite": s.get("host_pwrite"),
        "host_io_submit": s.get("host_io_submit"),
        "host_io_uring_writes": s.get("io_uring_writes"),
        "host_write_requests": s.get("host_write_requests"),
        "host_writes": h.get("writes"),
        "host_device_flushes": h.get("flushes"),
    }


def _avg(vals: list[float | None]) -> float | None:
    vals = [v for v in vals if v is not None]
    return float(mean(vals)) if vals else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _same(opts: dict[str, Any], fmt: str, want_fmt: str, want: dict[str, Any]) -> bool:
    return fmt == want_fmt and opts == dict(DEFAULTS, **want)


def measured_recommendations(amp: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """RECOMMENDATIONS with what this run measured: variant vs baseline per pattern and guest fs."""
    out = []
    for rec in RECOMMENDATIONS:
        measured = []
        for (vfmt, vopts), (bfmt, bopts) in rec["pairs"]:
            for r in amp:
                if not _same(r["options"], r["format"], vfmt, vopts):
                    continue
                base = [b for b in amp if (b["pattern"], b["guest_fs"]) == (r["pattern"], r["guest_fs"])
                        and _same(b["options"], b["format"], bfmt, bopts)]
                if not base:
                    continue
                b = base[0]
                measured.append({
                    "pattern": r["pattern"], "guest_fs": r["guest_fs"], "configuration": _variant(r),
                    "baseline": _variant(b), "factor_host_syncs": r["factor_host_syncs"],
                    "baseline_factor_host_syncs": b["factor_host_syncs"],
                    "factor_device_flushes": r["factor_device_flushes"],
                    "baseline_factor_device_flushes": b["factor_device_flushes"],
                    "host_syncs_vs_baseline": _ratio(r["factor_host_syncs"], b["factor_host_syncs"]),
                })
        out.append({"configuration": rec["configuration"], "effect": rec["effect"],
                    "cost_or_risk": rec["cost_or_risk"], "measured": measured})
    return out


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    trials = [t for t in ok_trials(doc) if t["params"].get("_workload", {}).get("kind") == "sync-writes"]
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for t in trials:
        groups[_key(t)].append(t)
    accel = None
    for t in doc["trials"]:
        accel = accel or (t.get("manifest") or {}).get("target", {}).get("accel")
    amp, thr = [], []
    for (fmt, pattern, fs, opts), ts in sorted(groups.items(), key=lambda kv: _order(kv[0])):
        per = [trial_counts(t) for t in ts]
        row: dict[str, Any] = {"format": fmt, "pattern": pattern, "guest_fs": fs, "options": dict(opts),
                               "trials": len(ts),
                               "guest_sync_kind": "O_DSYNC write" if pattern == "sequential" else "fdatasync"}
        for k in per[0]:
            row[k] = _avg([p[k] for p in per])
        probes = [((t.get("probes") or {}).get("qemu_syscalls") or {}) for t in ts]
        row["io_uring_counted"] = all(pq.get("io_uring_counted", False) for pq in probes)
        row["flags"] = sorted({f for t in ts for f in (t.get("flags") or [])})
        if row["options"].get("aio") == "io_uring" and not row["io_uring_counted"]:
            # flushes went through the ring and were not seen: the host sync count is unknown, not low
            row["host_fdatasync"] = None
            row["flags"].append("io_uring_not_counted: no QEMU trace events, host syncs through the ring unknown")
        gs = row["guest_fdatasync"]
        row["factor_host_syncs"] = _ratio(row["host_fdatasync"], gs)
        row["factor_device_flushes"] = _ratio(row["host_device_flushes"], gs)
        row["factor_host_syncs_per_trial"] = [_ratio(p["host_fdatasync"], p["guest_fdatasync"]) for p in per]
        row["per_guest_sync"] = {k: _ratio(row[k], gs) for k, _ in LAYERS}
        causes: dict[str, Any] = {}
        for pq in probes:
            for k, v in (pq.get("causes") or {}).items():
                causes.setdefault(k, []).append(v)
        row["causes"] = {k: _avg(v) for k, v in causes.items()}
        amp.append(row)
        iops = [t["metrics"]["write_iops"] for t in ts if "write_iops" in t["metrics"]]
        thr.append({"format": fmt, "pattern": pattern, "guest_fs": fs, "options": dict(opts),
                    "syncs_per_s": mean_ci(iops).as_dict("writes+syncs/s") if iops else None,
                    "accel": accel, "tcg": accel == "tcg"})
    return {"accel": accel, "amplification": amp, "throughput": thr, "r3_claim_host_syncs_per_guest_sync": R3_CLAIM,
            "recommendations": measured_recommendations(amp)}


def _order(key: tuple) -> tuple:
    """Patterns and fs in study order, plain raw and qcow2 before their variants."""
    fmt, pattern, fs, opts = key
    nondefault = [(k, str(v)) for k, v in opts if v != DEFAULTS[k]]
    return (PATTERNS.index(pattern) if pattern in PATTERNS else 9, fs != "none", fs, len(nondefault) > 0,
            fmt != "raw", sorted(nondefault), fmt)


# ---------------------------------------------------------------- report

def _optstr(k: str, v: Any) -> str:
    """Short enough for a chart's category axis: prealloc=metadata, cluster=1M, lazy_refcounts."""
    if k == "cluster_size" and isinstance(v, int):
        return f"cluster={size_label(v)}"
    if v is True:
        return k
    return f"{'prealloc' if k == 'preallocation' else k}={v}"


def _variant(r: dict[str, Any]) -> str:
    """The disk configuration alone: format and its non-default options."""
    extra = [_optstr(k, v) for k, v in r["options"].items() if v != DEFAULTS[k] and v is not None]
    return " ".join([r["format"], *extra])


def _label(r: dict[str, Any]) -> str:
    return f"{_variant(r)} · {r['pattern']} · fs={r['guest_fs']}"


def _n(v: Any, digits: int = 1) -> str:
    return "–" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) and v != int(v) else f"{int(v)}")


def _f(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def _chain(r: dict[str, Any]) -> str:
    """The layer diagram of one configuration, per guest sync: guest → blk → QEMU → host → device."""
    p = r["per_guest_sync"]
    return " → ".join(_f(p[k]) for k, _ in LAYERS)


def _waterfall_charts(amp: list[dict[str, Any]], per_chart: int = 5) -> list[Chart]:
    """One grouped-bar chart per pattern and guest fs (at most `per_chart` configurations each):
    every configuration is a group of bars, one per layer, in stack order."""
    charts = []
    cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in amp:
        cells[(r["pattern"], r["guest_fs"])].append(r)
    for (pattern, fs), rows in cells.items():
        chunks = [rows[i:i + per_chart] for i in range(0, len(rows), per_chart)]
        for n, chunk in enumerate(chunks):
            xs = [_variant(r) for r in chunk]
            part = f" ({n + 1}/{len(chunks)})" if len(chunks) > 1 else ""
            sync = "O_DSYNC write" if pattern == "sequential" else "guest fdatasync"
            charts.append(Chart(
                f"Waterfall: {pattern}, guest fs={fs}{part} — per {sync}, guest → QEMU → host → device",
                "bar", "disk configuration", f"count per {sync}",
                [Series(name, xs, [r["per_guest_sync"][k] for r in chunk]) for k, name in LAYERS],
                ref_lines=[(R3_CLAIM, "R3: ≥3 host syncs (qcow2)"), (1.0, "1 per guest sync")]))
    return charts


def _rec_cells(rec: dict[str, Any], cols: list[tuple[str, str]]) -> list[str]:
    cells = []
    for pattern, fs in cols:
        ms = [m for m in rec["measured"] if (m["pattern"], m["guest_fs"]) == (pattern, fs)]
        if not ms:
            cells.append("not in this run")
            continue
        parts = []
        for m in ms:
            who = f"{m['baseline'].split()[0]}: " if len(rec["measured"]) > len(
                {(x["pattern"], x["guest_fs"]) for x in rec["measured"]}) else ""
            parts.append(f"{who}{_f(m['baseline_factor_host_syncs'])} → {_f(m['factor_host_syncs'])} "
                         f"(dev {_f(m['baseline_factor_device_flushes'])} → {_f(m['factor_device_flushes'])})")
        cells.append("; ".join(parts))
    return cells


def present(doc: dict[str, Any], f: dict[str, Any]) -> tuple[list[str], list[Section]]:
    amp = f["amplification"]
    tcg = f.get("accel") == "tcg"
    summary = [f"accelerator: {f.get('accel') or 'n/a'}" + (" (counts hold; throughput is not representative)"
                                                          if tcg else "")]
    plain = [r for r in amp if r["options"] == DEFAULTS]
    for r in plain:
        summary.append(f"{_label(r)}: {_f(r['factor_host_syncs'])} host syncs and "
                       f"{_f(r['factor_device_flushes'])} device flushes per guest sync")
    others = [r for r in amp if r["options"] != DEFAULTS and r["factor_host_syncs"] is not None]
    if others:
        lo = min(others, key=lambda r: r["factor_host_syncs"])
        hi = max(others, key=lambda r: r["factor_host_syncs"])
        summary.append(f"{len(others)} more configurations (qcow2/raw options): from {_f(lo['factor_host_syncs'])} "
                       f"({_label(lo)}) to {_f(hi['factor_host_syncs'])} ({_label(hi)}) host syncs per guest "
                       "sync; see the waterfall and the recommendation table")
    charts = _waterfall_charts(amp)
    flow_cols = ["configuration", "pattern", "guest fs", "guest data syncs", "per guest sync: guest → guest blk "
                 "flushes → QEMU flushes → host syncs → host device flushes"]
    flow = Table("Layer diagram per configuration (counts per guest data sync)", flow_cols,
                 [[_variant(r), r["pattern"], r["guest_fs"], _n(r["guest_fdatasync"]), _chain(r)] for r in amp],
                 notes=[Note("Read left to right: one guest data sync (fdatasync, or one O_DSYNC write in the "
                             "sequential pattern) becomes this many flushes in the guest block layer, flush "
                             "requests at QEMU's virtual device, syncs QEMU asks of the host kernel for the image "
                             "(fdatasync/fsync syscalls + io_uring flushes), and flushes at the host device under "
                             "the image.")])
    cols = ["configuration", "pattern", "guest fs", "guest data syncs", "guest flushes", "guest blk writes",
            "guest write requests", "guest FUA writes", "QEMU flush ops", "QEMU writes", "host fdatasync", "host fsync", "host io_uring flushes",
            "host syncs (total)", "host pwrite*", "host io_submit", "host io_uring writes", "host device writes",
            "host device flushes", "host syncs / guest sync", "device flushes / guest sync"]
    rows = [[_variant(r), r["pattern"], r["guest_fs"], _n(r["guest_fdatasync"]), _n(r["guest_flushes"]),
             _n(r["guest_block_writes"]), _n(r.get("guest_write_requests")), _n(r.get("guest_fua_writes")),
             _n(r["qemu_flush_ops"]), _n(r["qemu_write_ops"]),
             _n(r["host_fdatasync_syscalls"]), _n(r["host_fsync_syscalls"]), _n(r["host_io_uring_flushes"]),
             _n(r["host_fdatasync"]), _n(r["host_pwrite"]), _n(r.get("host_io_submit")),
             _n(r.get("host_io_uring_writes")),
             _n(r["host_writes"]), _n(r["host_device_flushes"]), _f(r["factor_host_syncs"]),
             _f(r["factor_device_flushes"])] for r in amp]
    notes = [Note("Counts are means over the repetitions of one trial (a fixed number of 64 KiB writes; "
                  "append/overwrite: each followed by fdatasync, the last by fsync; sequential: O_DSYNC writes, "
                  "each its own sync). Each column is explained in docs/studies/sync-amplification.md.")]
    lost = [r for r in amp if r["options"].get("aio") == "io_uring" and not r.get("io_uring_counted")]
    if lost:
        notes.append(Note("QEMU trace events were unavailable for " + ", ".join(_label(r) for r in lost) +
                          ": flushes submitted through io_uring could not be counted, so their host sync "
                          "count is shown as unknown (–), not as 0.", "warn"))
    table = Table("Counts per trial at every layer", cols, rows, notes=notes)
    cause_keys = sorted({k for r in amp for k in r["causes"]})
    cause_table = Table("qcow2 metadata work per trial (QEMU trace events): why the extra syncs happen",
                        ["configuration", "pattern", "guest fs", *cause_keys],
                        [[_variant(r), r["pattern"], r["guest_fs"], *[_n(r["causes"].get(k)) for k in cause_keys]]
                         for r in amp if r["format"] == "qcow2"],
                        notes=[Note("cluster_allocations: qcow2_handle_alloc; refcount_block_writes / "
                                    "l2_table_writes: a dirty cache entry written to the image; "
                                    "refcount_cache_flushes / l2_cache_flushes: calls to flush that cache (also "
                                    "when nothing is dirty). An allocating write costs one ordering sync "
                                    "(refcount block before L2 entry) on top of the guest's own.")])
    r3_rows = [[_variant(r), r["pattern"], r["guest_fs"], f">= {R3_CLAIM:.0f}", _f(r["factor_host_syncs"]),
                "–" if r["factor_host_syncs"] is None else ("yes" if r["factor_host_syncs"] >= R3_CLAIM else "no")]
               for r in amp if r["format"] == "qcow2"]
    r3 = Table("R3's claim next to what was measured (host syncs per guest sync, qcow2)",
               ["configuration", "pattern", "guest fs", "R3 (QEMU 2.1.2)", "measured", "claim holds here"], r3_rows,
               notes=[Note(f"Measured with {_qemu_version(doc)}; R3 used QEMU 2.1.2 (Linux 3.10). The claim is "
                           "checked per configuration, never assumed; the Causes section shows the metadata work "
                           "behind each extra sync (per cluster allocation: the refcount block is synced before "
                           "the L2 entry that points at the new cluster).")])
    warn = [Note("Guests ran under TCG software emulation: throughput includes instruction emulation and is "
                 "NOT representative of KVM. The counts above do not depend on CPU speed.", "warn")] if tcg else []
    thr_rows = [[_variant(r), r["pattern"], r["guest_fs"], fmt_est(r["syncs_per_s"])] for r in f["throughput"]]
    thr_table = Table("Write+sync pairs per second (mean ± 95% CI)" + (" — TCG" if tcg else ""),
                      ["configuration", "pattern", "guest fs", "syncs/s"], thr_rows, notes=warn)
    rec_cols = sorted({(r["pattern"], r["guest_fs"]) for r in amp},
                      key=lambda c: (PATTERNS.index(c[0]) if c[0] in PATTERNS else 9, c[1] != "none", c[1]))
    rec = Table("What cuts amplification, and what it costs (measured: host syncs per guest sync, "
                "baseline → this configuration; dev = host device flushes per guest sync)",
                ["configuration", *[f"{p}, fs={fs}" for p, fs in rec_cols], "effect", "cost or risk"],
                [[r["configuration"], *_rec_cells(r, rec_cols), r["effect"], r["cost_or_risk"]]
                 for r in f["recommendations"]],
                notes=[Note("The baseline is plain qcow2 (cache=none, aio=threads, 64k clusters, no "
                            "preallocation) for the qcow2 options and cache modes, plain raw for raw's aio "
                            "variants, and qcow2 for 'raw format'; both measured in this run with the same "
                            "pattern and guest fs. 'not in this run': the run did not include that "
                            "configuration (the --quick matrix has only plain raw and qcow2).")])
    return summary, [
        Section("Layer waterfall", [*charts, flow, table], intro=(
            "One guest data sync, followed down the stack: the guest block layer turns it into a flush (two "
            "with ext4's journal when the file grows), QEMU's device sees the flush, QEMU asks the host kernel "
            "to sync the image (qcow2 adds an ordering sync for each cluster allocation), and the host device "
            "under the image flushes (the host ext4 adds a journal commit when the image file grows).")),
        Section("R3 claim", [r3]),
        Section("Recommendations", [rec]),
        Section("Causes", [cause_table]),
        Section("Throughput", [thr_table]),
    ]


def _qemu_version(doc: dict[str, Any]) -> str:
    for t in doc["trials"]:
        v = (t.get("manifest") or {}).get("target", {}).get("qemu_version")
        if v:
            return f"QEMU {v}" if not str(v).lower().startswith("qemu") else str(v)
    return "this host's QEMU"

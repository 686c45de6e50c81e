"""sync-amplification's analysis (pure): per configuration, every layer's count per guest data
sync (guest -> guest block layer -> QEMU device -> host syscalls -> host device), the qcow2
metadata work behind the extra syncs, throughput, and what each recommendation measured."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import mean
from typing import Any

from iolab.analysis.findings import Findings
from iolab.analysis.record import Est, JSONObject, Quantity, Record, Scalar
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.trials import Doc, Params, Trial, relative_resolution
from iolab.studies.common import ok_trials, size_label
from iolab.studies.sync_amplification.cost import CostFindings, analyze_cost
from iolab.studies.sync_amplification.spec import COUNT_WORKLOAD, DEFAULTS, OPTION_KEYS, PATTERNS

R3_CLAIM = 3.0  # "at least three host fdatasync() per guest fdatasync() on qcow2"

@dataclass(frozen=True)
class Advice:
    """A configuration that changes amplification, and the (variant, baseline) pairs, as (format,
    non-default options), whose measured factors the report sets side by side."""

    configuration: str
    pairs: list[tuple[tuple[str, Params], tuple[str, Params]]]
    effect: str
    cost_or_risk: str


# One row per configuration that changes amplification. `pairs`: (variant, baseline) as
# (format, non-default options); the report shows the measured factor of the variant next
# to its baseline's for every pattern and guest fs the run measured both for.
RECOMMENDATIONS: list[Advice] = [
    Advice(configuration="raw format (instead of qcow2)", pairs=[(("raw", {}), ("qcow2", {}))],
           effect="no metadata to order: one host sync per guest sync, also when appending",
           cost_or_risk="no snapshots, backing files or compression; thin only while the host file is sparse "
                        "(the host fs then allocates: extra device flushes on append)"),
    Advice(configuration="qcow2 preallocation=metadata",
           pairs=[(("qcow2", {"preallocation": "metadata"}), ("qcow2", {}))],
           effect="L2 tables and cluster offsets exist up front: no cluster allocation, so no ordering sync",
           cost_or_risk="image creation writes all metadata; the host file stays sparse, so the host fs still "
                        "allocates (device flushes) on first write"),
    Advice(configuration="qcow2 preallocation=falloc", pairs=[(("qcow2", {"preallocation": "falloc"}), ("qcow2", {}))],
           effect="clusters allocated up front (and the host file fallocated): appends behave like overwrites",
           cost_or_risk="the full virtual size is reserved on the host at once"),
    Advice(configuration="qcow2 preallocation=full", pairs=[(("qcow2", {"preallocation": "full"}), ("qcow2", {}))],
           effect="clusters allocated and written up front: appends behave like overwrites",
           cost_or_risk="the full virtual size is used and written at creation (slow to create)"),
    Advice(configuration="qcow2 lazy_refcounts=on", pairs=[(("qcow2", {"lazy_refcounts": True}), ("qcow2", {}))],
           effect="refcount updates are not ordered by a sync before the L2 update",
           cost_or_risk="after a crash the image is dirty and needs a refcount repair (qemu-img check -r all; "
                        "QEMU does it on open)"),
    Advice(configuration="qcow2 cluster_size=1M", pairs=[(("qcow2", {"cluster_size": 1 << 20}), ("qcow2", {}))],
           effect="one allocation per 1 MiB instead of per 64 KiB: 16x fewer ordering syncs when appending 64 KiB",
           cost_or_risk="more host space per allocation; a partial write to a new cluster writes more "
                        "(copy-on-write with backing files); fewer L2 entries per table"),
    Advice(configuration="qcow2 cluster_size=64k (explicit)",
           pairs=[(("qcow2", {"cluster_size": 64 << 10}), ("qcow2", {}))],
           effect="the default, named: must measure the same as plain qcow2 (a control)",
           cost_or_risk="none"),
    Advice(configuration="cache=unsafe", pairs=[(("qcow2", {"cache": "unsafe"}), ("qcow2", {}))],
           effect="guest flushes are ignored: no host syncs at all",
           cost_or_risk="DROPS DURABILITY: a host crash or power loss loses data the guest believed was on disk"),
    Advice(configuration="cache=writeback", pairs=[(("qcow2", {"cache": "writeback"}), ("qcow2", {}))],
           effect="guest flushes still reach the host: the same sync count as cache=none",
           cost_or_risk="image I/O goes through the host page cache (memory, double caching, less predictable "
                        "latency)"),
    Advice(configuration="cache=directsync", pairs=[(("qcow2", {"cache": "directsync"}), ("qcow2", {}))],
           effect="the guest sees a write-through disk and sends no flushes; QEMU makes every write durable itself",
           cost_or_risk="a host sync per guest write, also for writes the guest never asked to sync"),
    Advice(configuration="aio=native", pairs=[(("qcow2", {"aio": "native"}), ("qcow2", {})),
                                             (("raw", {"aio": "native"}), ("raw", {}))],
           effect="Linux AIO for reads/writes; flushes still go to a thread's fdatasync: same sync count",
           cost_or_risk="needs cache.direct (cache=none/directsync)"),
    Advice(configuration="aio=io_uring", pairs=[(("qcow2", {"aio": "io_uring"}), ("qcow2", {})),
                                               (("raw", {"aio": "io_uring"}), ("raw", {}))],
           effect="flushes are submitted through the ring (IORING_OP_FSYNC): same sync count, no fdatasync syscall",
           cost_or_risk="a syscall trace alone sees none of these syncs (counted from QEMU trace events here)"),
]

LAYERS = (  # (field, name in the waterfall): one guest data sync followed down the stack
    ("guest_fdatasync", "guest data syncs"),
    ("guest_flushes", "guest block-layer flushes"),
    ("qemu_flush_ops", "QEMU device flushes"),
    ("host_fdatasync", "host syncs (syscalls + io_uring)"),
    ("host_device_flushes", "host device flushes"),
)


class AmpCore(Record):
    """A disk configuration and what it amplifies: what the recommendation table pairs."""

    format: str
    pattern: str
    guest_fs: str
    options: dict[str, Scalar]
    factor_host_syncs: float | None
    factor_device_flushes: float | None


class AmpRow(AmpCore):
    """One configuration (format, pattern, guest fs, options): the mean count per trial at every
    layer, host syncs and device flushes per guest sync, the qcow2 causes, its flags."""

    trials: int
    guest_sync_kind: str
    guest_fdatasync: float | None
    guest_dsync_writes: float | None
    guest_writes: float | None
    guest_flushes: float | None
    guest_block_writes: float | None
    guest_write_requests: float | None
    guest_fua_writes: float | None
    guest_trace_flushes: float | None
    qemu_flush_ops: float | None
    qemu_write_ops: float | None
    host_fdatasync: float | None
    host_fdatasync_syscalls: float | None
    host_fsync_syscalls: float | None
    host_io_uring_flushes: float | None
    host_pwrite: float | None
    host_io_submit: float | None
    host_io_uring_writes: float | None
    host_write_requests: float | None
    host_writes: float | None
    host_device_flushes: float | None
    io_uring_counted: bool
    flags: list[str]
    factor_host_syncs_per_trial: list[float | None]
    per_guest_sync: dict[str, float | None]  # LAYERS' fields -> count per guest data sync
    causes: dict[str, float | None]          # qcow2 trace events -> mean per trial


class ThroughputRow(Record):
    format: str
    pattern: str
    guest_fs: str
    options: dict[str, Scalar]
    syncs_per_s: Est | None
    accel: str | None
    tcg: bool


class MeasuredPair(Record):
    """A recommendation's variant against its baseline, as this run measured both."""

    pattern: str
    guest_fs: str
    configuration: str
    baseline: str
    factor_host_syncs: float | None
    baseline_factor_host_syncs: float | None
    factor_device_flushes: float | None
    baseline_factor_device_flushes: float | None
    host_syncs_vs_baseline: float | None


class Recommendation(Record):
    configuration: str
    effect: str
    cost_or_risk: str
    measured: list[MeasuredPair]


class SyncAmplificationFindings(Findings):
    """docs/results.md, sync-amplification."""

    accel: str | None
    amplification: list[AmpRow]
    throughput: list[ThroughputRow]
    r3_claim_host_syncs_per_guest_sync: float
    recommendations: list[Recommendation]
    cost: CostFindings | None  # None: a run without the application workloads (an older run)


def _options(target: Params) -> Params:
    return {k: target.get(k, DEFAULTS[k]) for k in OPTION_KEYS}


def _key(t: Trial) -> tuple[str, str, str, tuple[tuple[str, Any], ...]]:
    tg, w = t["params"]["_target"], t["params"]["_workload"]
    return (tg.get("format", "raw"), w.get("pattern"), tg.get("guest_fs", "none"),
            tuple(sorted(_options(tg).items(), key=lambda kv: kv[0])))


def trial_counts(t: Trial) -> dict[str, float | None]:
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
    known = [v for v in vals if v is not None]
    return float(mean(known)) if known else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _same(opts: dict[str, Scalar], fmt: str, want_fmt: str, want: Params) -> bool:
    return fmt == want_fmt and opts == dict(DEFAULTS, **want)


def measured_recommendations(amp: Sequence[AmpCore | Mapping[str, object]]) -> list[Recommendation]:
    """RECOMMENDATIONS with what this run measured: variant vs baseline per pattern and guest fs."""
    rows = [AmpCore.coerce(r) if isinstance(r, Mapping) else r for r in amp]
    out = []
    for rec in RECOMMENDATIONS:
        measured = []
        for (vfmt, vopts), (bfmt, bopts) in rec.pairs:
            for r in rows:
                if not _same(r.options, r.format, vfmt, vopts):
                    continue
                base = [b for b in rows if (b.pattern, b.guest_fs) == (r.pattern, r.guest_fs)
                        and _same(b.options, b.format, bfmt, bopts)]
                if not base:
                    continue
                b = base[0]
                measured.append(MeasuredPair(
                    pattern=r.pattern, guest_fs=r.guest_fs, configuration=variant(r), baseline=variant(b),
                    factor_host_syncs=r.factor_host_syncs, baseline_factor_host_syncs=b.factor_host_syncs,
                    factor_device_flushes=r.factor_device_flushes,
                    baseline_factor_device_flushes=b.factor_device_flushes,
                    host_syncs_vs_baseline=_ratio(r.factor_host_syncs, b.factor_host_syncs)))
        out.append(Recommendation(configuration=rec.configuration, effect=rec.effect, cost_or_risk=rec.cost_or_risk,
                                  measured=measured))
    return out


def findings(doc: Doc) -> SyncAmplificationFindings:
    est = RunEstimator(doc)  # a fixed number of writes per trial: harmonic mean, adaptive-stopping interval
    # the counted trials (probes on); a run from before the cost section has no workload label
    trials = [t for t in ok_trials(doc) if t["params"].get("_workload", {}).get("kind") == "sync-writes"
              and t["params"].get("workload", COUNT_WORKLOAD) == COUNT_WORKLOAD]
    groups: dict[tuple[str, str, str, tuple[tuple[str, Any], ...]], list[Trial]] = defaultdict(list)
    for t in trials:
        groups[_key(t)].append(t)
    accel = None
    for t in doc["trials"]:
        accel = accel or (t.get("manifest") or {}).get("target", {}).get("accel")
    amp, thr = [], []
    for (fmt, pattern, fs, opts), ts in sorted(groups.items(), key=lambda kv: _order(kv[0])):
        per = [trial_counts(t) for t in ts]
        counts = {k: _avg([p[k] for p in per]) for k in per[0]}
        probes = [((t.get("probes") or {}).get("qemu_syscalls") or {}) for t in ts]
        counted = all(pq.get("io_uring_counted", False) for pq in probes)
        flags = sorted({f for t in ts for f in (t.get("flags") or [])})
        if dict(opts).get("aio") == "io_uring" and not counted:
            # flushes went through the ring and were not seen: the host sync count is unknown, not low
            counts["host_fdatasync"] = None
            flags.append("io_uring_not_counted: no QEMU trace events, host syncs through the ring unknown")
        gs = counts["guest_fdatasync"]
        causes: dict[str, list[float | None]] = {}
        for pq in probes:
            for k, v in (pq.get("causes") or {}).items():
                causes.setdefault(k, []).append(v)
        amp.append(AmpRow.model_validate({
            "format": fmt, "pattern": pattern, "guest_fs": fs, "options": dict(opts), "trials": len(ts),
            "guest_sync_kind": "O_DSYNC write" if pattern.startswith("sequential") else "fdatasync", **counts,
            "io_uring_counted": counted, "flags": flags,
            "factor_host_syncs": _ratio(counts["host_fdatasync"], gs),
            "factor_device_flushes": _ratio(counts["host_device_flushes"], gs),
            "factor_host_syncs_per_trial": [_ratio(p["host_fdatasync"], p["guest_fdatasync"]) for p in per],
            "per_guest_sync": {k: _ratio(counts[k], gs) for k, _ in LAYERS},
            "causes": {k: _avg(v) for k, v in causes.items()}}))
        iops = [t["metrics"]["write_iops"] for t in ts if "write_iops" in t["metrics"]]
        rel = relative_resolution(ts, "write_iops")  # fio's millisecond clock
        thr.append(ThroughputRow(format=fmt, pattern=pattern, guest_fs=fs, options=dict(opts),
                                 syncs_per_s=Quantity.of(est.harmonic(iops, rel), "writes+syncs/s") if iops else None,
                                 accel=accel, tcg=accel == "tcg"))
    return SyncAmplificationFindings(
        accel=accel, amplification=amp, throughput=thr, r3_claim_host_syncs_per_guest_sync=R3_CLAIM,
        recommendations=measured_recommendations(amp), cost=analyze_cost(doc, accel == "tcg"))


def analyze(doc: Doc) -> JSONObject:
    """The findings as the results document holds them (docs/results.md)."""
    return findings(doc).to_json()


def _order(key: tuple[str, str, str, tuple[tuple[str, Any], ...]]) -> tuple[Any, ...]:
    """Patterns and fs in study order, plain raw and qcow2 before their variants."""
    fmt, pattern, fs, opts = key
    nondefault = [(k, str(v)) for k, v in opts if v != DEFAULTS[k]]
    return (PATTERNS.index(pattern) if pattern in PATTERNS else 9, fs != "none", fs, len(nondefault) > 0,
            fmt != "raw", sorted(nondefault), fmt)


def _optstr(k: str, v: Any) -> str:
    """Short enough for a chart's category axis: prealloc=metadata, cluster=1M, lazy_refcounts."""
    if k == "cluster_size" and isinstance(v, int):
        return f"cluster={size_label(v)}"
    if v is True:
        return k
    return f"{'prealloc' if k == 'preallocation' else k}={v}"


def variant(r: AmpCore | ThroughputRow) -> str:
    """The disk configuration alone: format and its non-default options."""
    extra = [_optstr(k, v) for k, v in r.options.items() if v != DEFAULTS[k] and v is not None]
    return " ".join([r.format, *extra])

"""The published claims of the five reference studies, and how this machine's runs test them.

Each claim names the study that measures it and a function from that study's results
document (with findings) to a verdict:

  holds            the measured value (with its 95 % CI) is what the paper said, by the stated rule
  differs          it is measurably not, and the reason says what was measured instead
  not testable here  the run cannot answer it on this machine (e.g. guest speed ratios under
                   TCG, a matrix the quick run leaves out, a study that did not complete)

Every verdict comes with one sentence of reason built from the measurements. Pure: a claim is
evaluated on stored results documents, so it is tested without a machine
(../shared/reference-studies.md has the papers' numbers).

Size: one short function per published claim (about twenty), in the papers' order, so the
table of claims can be read against the papers side by side.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import relative_resolution
from iolab.studies.common import ok_trials
from iolab.studies.sync_amplification.cost import gain_text
from iolab.studies.sync_amplification.spec import DEFAULTS
from iolab.studies.vm_profile.analysis import collect

Doc = dict[str, Any]
HOLDS, DIFFERS, UNTESTABLE = "holds", "differs", "not testable here"


@dataclass(frozen=True)
class Verdict:
    verdict: str
    value: str     # what was measured, for the table ("0.83 [0.78, 0.88]")
    reason: str    # one sentence, from measurements
    estimate: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "value": self.value, "reason": self.reason, "estimate": self.estimate}


@dataclass(frozen=True)
class Claim:
    id: str
    reference: str          # R1..R5
    study: str              # the built-in study that measures it
    text: str               # the published claim, in words
    rule: str               # how "holds" is decided here
    evaluate: Callable[[Doc, bool], Verdict]   # (the study's document, quick?) -> Verdict


# -- small helpers ---------------------------------------------------------------------------
def _fmt(e: Estimate | dict[str, Any] | None, digits: int = 2) -> str:
    if e is None:
        return "–"
    mean, lo, hi = ((e.mean, e.lo, e.hi) if isinstance(e, Estimate)
                    else (e.get("mean"), *(e.get("ci95") or (None, None))))
    if mean is None or not math.isfinite(mean):
        return "–"
    def f(x: float | None) -> str:
        return "?" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"
    if hi is None or hi == math.inf:  # no upper end (a harmonic mean's interval): open, as the reports show it
        return f"{mean:.{digits}f} [{f(lo)}, ∞)"
    return f"{mean:.{digits}f} [{f(lo)}, {f(hi)}]"


def _accel(doc: Doc) -> str | None:
    return (doc.get("findings") or {}).get("accel")


def _tcg_reason(doc: Doc, measured: str) -> str:
    return ("guests ran under TCG software emulation (no usable KVM here): guest/host speed ratios measure the "
            "emulator, not the device model; needs KVM")


def _trials(doc: Doc, where: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    """The ok trials whose params match `where` (labels or _target/_workload keys) and have `metric`."""
    out = []
    for t in ok_trials(doc):
        p = t["params"]
        # the full configs win over labels (a study's analysis may rewrite labels for display, e.g. "4k")
        scope = {**{k: v for k, v in p.items() if not k.startswith("_")}, **p.get("_target", {}),
                 **p.get("_workload", {})}
        if all(scope.get(k) == v for k, v in where.items()) and metric in t["metrics"]:
            out.append(t)
    return out


def _values(doc: Doc, where: dict[str, Any], metric: str) -> list[float]:
    """Metric values of ok trials whose params match `where`."""
    return [float(t["metrics"][metric]) for t in _trials(doc, where, metric)]


def _harmonic_ratio(doc: Doc, num: dict[str, Any], den: dict[str, Any], metric: str) -> Estimate:
    """The ratio of the harmonic means of `metric` (fixed work per trial) of the trials matching
    `num` and `den`, as the studies compute it, widened by the clock error of both sides."""
    a, b = _trials(doc, num, metric), _trials(doc, den, metric)
    return RunEstimator(doc).ratio_of("harmonic", [float(t["metrics"][metric]) for t in a],
                                      [float(t["metrics"][metric]) for t in b],
                                      (relative_resolution(a, metric), relative_resolution(b, metric)))


def _overlaps(e: Estimate, lo: float, hi: float) -> bool | None:
    """True if the CI meets [lo, hi], False if it lies wholly outside, None without an interval."""
    if not (math.isfinite(e.lo) and math.isfinite(e.hi)):
        return None
    return e.hi >= lo and e.lo <= hi


def _not_run(doc: Doc | None, study: str) -> Verdict | None:
    if doc is None:
        return Verdict(UNTESTABLE, "–", f"the {study} study has not run in this reproduction")
    if not ok_trials(doc):
        return Verdict(UNTESTABLE, "–", f"the {study} study has no successful trial (status {doc.get('status')})")
    return None


# -- R1: host vs VM, virtio-blk vs emulated (study virtio) ----------------------------------------
KIB4 = 4 << 10


def _largest_record(doc: Doc) -> int:
    recs = {int(t["params"]["_workload"]["record"]) for t in ok_trials(doc) if "record" in t["params"]["_workload"]}
    return max(recs) if recs else 4 << 20


def _bus_ratio(doc: Doc, bus: str, record: int, test: str) -> Estimate:
    return _harmonic_ratio(doc, {"target": bus, "test": test, "record": record},  # as the study's ratio_vs_host
                           {"target": "host", "test": test, "record": record}, "kbps")


def _r1_band(bus: str, lo: float, hi: float, words: str) -> Callable[[Doc, bool], Verdict]:
    def evaluate(doc: Doc, quick: bool) -> Verdict:
        rec = _largest_record(doc)
        ests = {t: _bus_ratio(doc, bus, rec, t) for t in ("write", "read")}
        ests = {t: e for t, e in ests.items() if e.n}
        if not ests:
            return Verdict(UNTESTABLE, "–", f"no {bus} and host trials at {_size(rec)} records")
        value = "; ".join(f"{t} {_fmt(e)}" for t, e in ests.items())
        if _accel(doc) == "tcg":
            return Verdict(UNTESTABLE, value, _tcg_reason(doc, f"{bus}/host at {_size(rec)}: {value}"))
        fits = [_overlaps(e, lo, hi) for e in ests.values()]
        where = f"of the host at {_size(rec)} records"
        if all(fits):
            return Verdict(HOLDS, value, f"{bus} reaches {value} {where}, within {words}")
        if any(f is None for f in fits):
            return Verdict(UNTESTABLE, value, f"too few repetitions for an interval: {bus} {value} {where}")
        return Verdict(DIFFERS, value, f"{bus} reaches {value} {where}, outside {words}")
    return evaluate


def _r1_gap(doc: Doc, quick: bool) -> Verdict:
    rec = _largest_record(doc)
    small, large = _bus_ratio(doc, "ide", KIB4, "write"), _bus_ratio(doc, "ide", rec, "write")
    if not small.n or not large.n:
        return Verdict(UNTESTABLE, "–", "no emulated-disk (ide) write trials at 4 KiB and at large records")
    value = f"ide/host write: 4 KiB {_fmt(small)}, {_size(rec)} {_fmt(large)}"
    if _accel(doc) == "tcg":
        return Verdict(UNTESTABLE, value, _tcg_reason(doc, value))
    if small.hi < large.lo:
        return Verdict(HOLDS, value, f"the emulated disk loses more at 4 KiB than at {_size(rec)} records ({value})")
    return Verdict(DIFFERS, value, f"the emulated disk's gap to the host is not wider at 4 KiB than at "
                                   f"{_size(rec)} ({value})")


def _r1_host_records(doc: Doc, quick: bool) -> Verdict:
    rec = _largest_record(doc)
    r = _harmonic_ratio(doc, {"target": "host", "test": "write", "record": rec},  # fixed bytes per trial
                        {"target": "host", "test": "write", "record": KIB4}, "kbps")
    if not r.n:
        return Verdict(UNTESTABLE, "–", "no host write trials at 4 KiB and at large records")
    value = f"{_fmt(r, 1)}×"
    words = f"host writes with {_size(rec)} records are {value} as fast as with 4 KiB records (R1: 4.4× at 4 MiB)"
    if math.isfinite(r.lo) and r.lo >= 2:
        return Verdict(HOLDS, value, words + ": fewer, larger requests", r.as_dict())
    return Verdict(DIFFERS if math.isfinite(r.hi) and r.hi < 2 else UNTESTABLE, value, words, r.as_dict())


# -- R2: write modes and block size (study write-modes) ---------------------------------------------
def _helper_mib_s(doc: Doc, mode: str, bs: int) -> list[float]:
    """MiB/s of the helper (fixed work per trial: compared as harmonic means)."""
    return _values(doc, {"kind": "writemode", "mode": mode, "bs": bs}, "throughput_mib_s")


def _r2_block_size(doc: Doc, quick: bool) -> Verdict:
    slow, fast = _helper_mib_s(doc, "o_sync", 512), _helper_mib_s(doc, "o_sync", 4096)
    r = RunEstimator(doc).ratio_of("harmonic", fast, slow)   # how many times faster 4 KiB is than 512 B
    if not r.n:
        return Verdict(UNTESTABLE, "–", "no o_sync trials at 512 B and 4 KiB")
    calls = RunEstimator(doc).ratio(_values(doc, {"kind": "writemode", "mode": "o_sync", "bs": 4096}, "syscalls_per_s"),
                     _values(doc, {"kind": "writemode", "mode": "o_sync", "bs": 512}, "syscalls_per_s"))
    value = f"{_fmt(r, 1)}×"
    why = (f"O_SYNC writes of 4 KiB are {value} as fast as 512 B for the same data (R2: 7.8×), with calls per "
           f"second changing only {_fmt(calls)}×: the time follows the number of calls")
    if math.isfinite(r.lo) and r.lo >= 3:
        return Verdict(HOLDS, value, why, r.as_dict())
    if math.isfinite(r.hi) and r.hi < 3:
        return Verdict(DIFFERS, value, why, r.as_dict())
    return Verdict(UNTESTABLE, value, "too noisy to decide: " + why, r.as_dict())


def _r2_knee(doc: Doc, quick: bool) -> Verdict:
    f = doc.get("findings") or {}
    knee = (f.get("knee") or {}).get("o_sync")
    thr = (f.get("throughput") or {}).get("o_sync") or {}
    if knee is None or not thr:
        return Verdict(UNTESTABLE, "–", "no o_sync throughput curve")
    sizes = sorted(int(b) for b in thr)
    value = f"{_size(knee)} (grid {', '.join(_size(s) for s in sizes)})"
    near = [s for s in sizes if 32 << 10 <= s <= 128 << 10]
    if knee in near:
        return Verdict(HOLDS, value, f"O_SYNC reaches 90 % of its best throughput from {_size(knee)} on, "
                                     "as R2 saw at 64 KiB")
    if not near:
        return Verdict(UNTESTABLE, value, "the measured block sizes do not resolve 32–128 KiB (run the full study)")
    at64 = thr.get(str(65536)) or thr.get(str(near[0]))
    best = thr.get(str(knee))
    growth = best["mean"] / at64["mean"] if at64 and best and at64.get("mean") else None
    more = f"throughput still grew {growth:.1f}× from {_size(near[-1])} to {_size(knee)}" if growth else ""
    side = "later" if knee > near[-1] else "earlier"
    tail = f": {more}" if more and side == "later" else ""
    return Verdict(DIFFERS, value, f"gains stop {side} here, at {_size(knee)}{tail}; "
                                   "R2 says the threshold depends on device and OS (this is a scratch loop device)")


def _size(n: int) -> str:
    for suffix, mult in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult} {suffix}"
    return f"{n} B"


# -- R3: qcow2 sync amplification (study sync-amplification) ------------------------------------------
def _amp_row(doc: Doc, fmt: str, pattern: str, fs: str) -> dict[str, Any] | None:
    for r in (doc.get("findings") or {}).get("amplification") or []:
        if (r["format"], r["pattern"], r["guest_fs"]) == (fmt, pattern, fs) and r["options"] == DEFAULTS:
            return r
    return None


def _causes(r: dict[str, Any]) -> str:
    gs = r.get("guest_fdatasync") or 0
    parts = [f"{k} {v / gs:.2f}" for k, v in sorted((r.get("causes") or {}).items()) if v and gs]
    return f" (per guest sync, qcow2 events: {', '.join(parts)})" if parts else ""


def _r3_three(doc: Doc, quick: bool) -> Verdict:
    plain, ext4 = _amp_row(doc, "qcow2", "append", "none"), _amp_row(doc, "qcow2", "append", "ext4")
    rows = [r for r in (plain, ext4) if r and r.get("factor_host_syncs") is not None]
    if not rows:
        return Verdict(UNTESTABLE, "–", "no qcow2 append row with host sync counts")
    value = "; ".join(f"fs={r['guest_fs']}: {r['factor_host_syncs']:.2f}" for r in rows)
    low = min(rows, key=lambda r: r["factor_host_syncs"])
    if low["factor_host_syncs"] >= 2.95:
        return Verdict(HOLDS, value, f"at least 3 host syncs per guest sync in every measured case{_causes(low)}; "
                                     "counts hold under TCG")
    return Verdict(DIFFERS, value, f"{low['factor_host_syncs']:.2f} host syncs per guest sync with fs="
                                   f"{low['guest_fs']}{_causes(low)}: this QEMU orders a cluster allocation with "
                                   "fewer syncs than R3's QEMU 2.1.2; counts hold under TCG")


def _r3_journal(doc: Doc, quick: bool) -> Verdict:
    plain, ext4 = _amp_row(doc, "qcow2", "append", "none"), _amp_row(doc, "qcow2", "append", "ext4")
    if not plain or not ext4 or not plain.get("factor_host_syncs") or ext4.get("factor_host_syncs") is None:
        return Verdict(UNTESTABLE, "–", "needs qcow2 append with and without a guest ext4")
    k = ext4["factor_host_syncs"] / plain["factor_host_syncs"]
    value = f"{k:.2f}× ({ext4['factor_host_syncs']:.2f} / {plain['factor_host_syncs']:.2f})"
    g = ext4.get("guest_flushes") or 0
    gs = ext4.get("guest_fdatasync") or 0
    flushes = f"; the guest's block layer sent {g / gs:.2f} flushes per fdatasync with ext4" if gs else ""
    if 1.8 <= k <= 2.2:
        return Verdict(HOLDS, value, f"the guest ext4 journal multiplies the host syncs by {value}{flushes}")
    return Verdict(DIFFERS, value, f"the guest ext4 journal multiplies the host syncs by {value}, not 2{flushes}")


def _r3_cost(apps: tuple[str, ...]) -> Callable[[Doc, bool], Verdict]:
    """R3's cost findings from the study's cost section: each named application on raw (no
    ordering syncs: R3's barrier in the strongest form) against default qcow2, read with the
    section's family interval. All hold -> holds; any differs -> differs; else not testable."""
    def evaluate(doc: Doc, quick: bool) -> Verdict:
        cost = (doc.get("findings") or {}).get("cost") or {}
        rows = [a for a in cost.get("against_r3") or [] if a["app"] in apps and a["configuration"] == "raw"]
        if not rows:
            return Verdict(UNTESTABLE, "–", "this run had no cost section for " + ", ".join(apps))
        value = "; ".join(f"{a['r3_name']} {gain_text(a['measured'])}" for a in rows)
        said = {a["verdict"] for a in rows}
        reason = "; ".join(f"{a['r3_name']} (R3 {a['r3_gain_pct']:+.1f} %): {a['reason']}" for a in rows)
        if said == {"holds"}:
            return Verdict(HOLDS, value, reason, rows[0]["measured"] if len(rows) == 1 else None)
        if "differs" in said:
            return Verdict(DIFFERS, value, reason)
        return Verdict(UNTESTABLE, value, ("too noisy to decide: " if "undecided" in said else "") + reason)
    return evaluate


# -- R4: cgroup weights (study cgroup-weights) -------------------------------------------------------
R4_RATIOS = {"200": 2.03, "400": 4.08, "800": 8.12}


def _r4_four(doc: Doc, quick: bool) -> Verdict:
    f = doc.get("findings") or {}
    four = (f.get("by_groups") or {}).get("4")
    if not four:
        return Verdict(UNTESTABLE, "–", "no 4-group trials under a weight-enforcing controller"
                       + (f" (controller active: {f.get('controller_active')})" if f else ""))
    cr = four["class_ratio"]
    value = "1 : " + " : ".join(_fmt(cr[c]) for c in ("200", "400", "800"))
    tol = f.get("ratio_tolerance", 0.15)
    bad = [c for c, pub in R4_RATIOS.items()
           if cr[c].get("ci95") and cr[c]["ci95"][0] is not None
           and not (cr[c]["ci95"][0] <= pub * (1 + tol) and cr[c]["ci95"][1] >= pub * (1 - tol))]
    ctrl = f.get("controller")
    if not bad:
        return Verdict(HOLDS, value, f"under {ctrl} every weight class is within ±{tol:.0%} of R4's ratio")
    return Verdict(DIFFERS, value, f"under {ctrl} weight class(es) {', '.join(bad)} lie outside ±{tol:.0%} of "
                                   f"R4's ratios" + _flags_words(four))


def _flags_words(v: dict[str, Any]) -> str:
    return f" — flagged: {'; '.join(v['flag_details'])}" if v.get("flag_details") else ""


def _r4_beside_app(doc: Doc, quick: bool) -> Verdict:
    f = doc.get("findings") or {}
    tenant = (f.get("tenant") or {}).get(f.get("controller") or "", None)
    if not tenant or not tenant.get("groups_beside"):
        return Verdict(UNTESTABLE, "–", "this run had no application beside the groups"
                       + (" (the --quick study leaves the tenant out)" if quick else ""))
    g = tenant["groups_beside"]
    value = "1 : " + " : ".join(_fmt(g["class_ratio"][c]) for c in ("200", "400", "800"))
    # the findings' headline tenant is YCSB whenever the run had it; runs before the choice ran db_bench
    app = ("YCSB workload A on RocksDB, as R4" if tenant.get("app") == "ycsb"
           else "RocksDB db_bench (R4 used YCSB workload A on RocksDB)")
    own = (tenant.get("beside") or {})
    ops, p99 = (own.get("tenant_ops_s") or {}).get("mean"), (own.get("tenant_read_p99_us") or {}).get("mean")
    if tenant.get("app") == "ycsb" and ops is not None and p99 is not None:
        app += f" ({ops:,.0f} ops/s, read p99 {p99:,.0f} µs here; R4: 8,412.8 ops/s, 271 µs on its SATA SSD)"
    if g["ratios_hold"]:
        return Verdict(HOLDS, value, f"the four groups keep {value} beside {app}")
    return Verdict(DIFFERS, value, f"beside {app} the four groups split {value}")


def _r4_upto16(doc: Doc, quick: bool) -> Verdict:
    by = (doc.get("findings") or {}).get("by_groups") or {}
    ns = [n for n in ("8", "16") if n in by]
    if len(ns) < 2:
        return Verdict(UNTESTABLE, "–", "this run did not measure 8 and 16 groups"
                       + (" (the --quick study runs N = 4 only)" if quick else ""))
    value = "; ".join(f"N={n}: worst share error {_fmt(by[n]['max_abs_log2_error'])} (log2)" for n in ns)
    broken = [n for n in ns if by[n]["broken"]]
    if not broken:
        return Verdict(HOLDS, value, f"proportional sharing held at N = 8 and 16 ({value})")
    sig = (doc.get("findings") or {}).get("breakdown_signals") or {}
    return Verdict(DIFFERS, value, f"sharing broke already at N = {', '.join(broken)}{_signals_words(sig)}")


def _signals_words(sig: dict[str, Any]) -> str:
    parts = []
    if sig.get("tag_pressure"):
        parts.append(f"iodepth × N = {sig.get('iodepth_total')} reached nr_requests = {sig.get('nr_requests')}")
    if sig.get("bfq_tag_limit_min") is not None:
        parts.append(f"BFQ let the smallest group queue only {sig['bfq_tag_limit_min']:.0f} requests")
    if sig.get("generator_cpu_busy") is not None:
        parts.append(f"fio used {sig['generator_cpu_busy']:.2f} CPUs")
    return f": {'; '.join(parts)}" if parts else ""


def _r4_breaks32(doc: Doc, quick: bool) -> Verdict:
    f = doc.get("findings") or {}
    by = f.get("by_groups") or {}
    if not any(int(n) >= 32 for n in by):
        return Verdict(UNTESTABLE, "–", "this run did not reach 32 groups"
                       + (" (the --quick study runs N = 4 only)" if quick else ""))
    n, bracket = f.get("breakdown_n"), f.get("breakdown_bracket")
    value = f"breaks at N = {n}" if n else "did not break"
    sig = _signals_words(f.get("breakdown_signals") or {})
    if n == 32:
        return Verdict(HOLDS, value, f"sharing breaks first at 32 groups (bracket {bracket}){sig}")
    return Verdict(DIFFERS, value, (f"sharing breaks first at N = {n} (bracket {bracket}){sig}" if n else
                                    f"sharing held up to N = {max(int(k) for k in by)}"))


# -- R5: two VM modes (study vm-profile) ------------------------------------------------------------
def _profile_ratio(doc: Doc, metric: str) -> Estimate:
    v = collect(doc)
    return RunEstimator(doc).ratio(v.get("encrypted", {}).get(metric, []), v.get("performance", {}).get(metric, []))


def _r5_part(part: str, metrics: tuple[str, ...]) -> Callable[[Doc, bool], Verdict]:
    def evaluate(doc: Doc, quick: bool) -> Verdict:
        ests = {m: _profile_ratio(doc, m) for m in metrics}
        ests = {m: e for m, e in ests.items() if e.n}
        if not ests:
            return Verdict(UNTESTABLE, "–", f"no {part} trials for both profiles")
        value = "; ".join(f"{m.split('_', 1)[1]} {_fmt(e)}" for m, e in ests.items())
        tcg = _accel(doc) == "tcg"
        if part == "memory":
            return Verdict(UNTESTABLE, value, "R5's balanced mode signed memory; QEMU has no such mode, "
                                              "so iolab's encrypted profile changes the disk only "
                                              f"(encrypted/performance: {value})")
        if part == "cpu":
            equal = all(_overlaps(e, 0.95, 1.05) for e in ests.values())
            words = f"encrypted/performance: {value}" + (" (both guests under TCG)" if tcg else "")
            return Verdict(HOLDS if equal else DIFFERS, value,
                           ("CPU speed is the same in both profiles within ±5 %: " if equal else
                            "CPU speed differs between the profiles: ") + words)
        lower = [e for e in ests.values() if math.isfinite(e.hi) and e.hi < 1]
        if len(lower) == len(ests):
            return Verdict(HOLDS, value, f"every disk pattern is slower on the encrypted disk ({value})"
                           + ("; under TCG the penalty is a lower bound (emulation dilutes it)" if tcg else ""))
        if tcg:
            return Verdict(UNTESTABLE, value, "under TCG the emulated guest I/O path dominates each request, so "
                                              f"the encryption cost is diluted ({value}); needs KVM")
        return Verdict(DIFFERS, value, f"not every disk pattern is slower encrypted ({value})")
    return evaluate


CPU = ("cpu_primes_1e8_s", "cpu_events_per_s_1t")
MEMORY = ("mem_triad_mb_s", "mem_copy_mb_s")
DISK = ("disk_randread_iops", "disk_randwrite_iops", "disk_read_iops", "disk_write_iops")

CLAIMS: list[Claim] = [
    Claim("R1-virtio-80", "R1", "virtio", "virtio-blk reaches about 80 % of the host",
          "guest/host KB/s at the largest record, write and read: every 95 % CI meets 0.70–0.90",
          _r1_band("virtio-blk", 0.70, 0.90, "0.70–0.90")),
    Claim("R1-emulated-53", "R1", "virtio", "the emulated disk (IDE) reaches 53–55 % of the host at large records",
          "ide/host KB/s at the largest record, write and read: every 95 % CI meets 0.45–0.65",
          _r1_band("ide", 0.45, 0.65, "0.45–0.65")),
    Claim("R1-gap-small-records", "R1", "virtio", "the smaller the record, the wider the gap",
          "ide/host write ratio: the 4k CI lies wholly below the large-record CI", _r1_gap),
    Claim("R1-host-records", "R1", "virtio", "on the host, 4 MiB records write several times faster than 4 KiB "
          "(R1: 4.4×)", "host write KB/s large/4k: CI lower bound ≥ 2", _r1_host_records),
    Claim("R2-block-size", "R2", "write-modes", "larger blocks are much faster: fewer system calls for the same "
          "data (512 B took 7.8× as long as 4 KiB)", "O_SYNC 4 KiB vs 512 B speed-up: CI lower bound ≥ 3",
          _r2_block_size),
    Claim("R2-knee-64k", "R2", "write-modes", "gains stop at 64 KiB (a threshold that depends on device and OS)",
          "the O_SYNC knee (90 % of the best throughput) lies in 32–128 KiB", _r2_knee),
    Claim("R3-three-syncs", "R3", "sync-amplification", "one guest fdatasync costs at least 3 host fdatasync "
          "on qcow2", "host syncs per guest sync on a fresh qcow2 when appending ≥ 2.95 (counts)", _r3_three),
    Claim("R3-journal-doubles", "R3", "sync-amplification", "journaling in the guest filesystem doubles it",
          "qcow2 append host syncs per guest sync, with ext4 / without: 1.8–2.2", _r3_journal),
    Claim("R3-cost-dd-append", "R3", "sync-amplification", "cheaper ordering speeds dd append up by 81.1 %",
          "dd append (64 KiB O_DSYNC) on raw vs default qcow2, guest ext4: simultaneous CI wholly >= +20 %",
          _r3_cost(("dd-append",))),
    Claim("R3-cost-small", "R3", "sync-amplification", "for the other applications the gain is small: dd "
          "overwrite +4.5 %, Mobibench append +4.7 % and overwrite −2.7 %, varmail +9.2 %, YCSB insert +3.3 % and "
          "update +0.6 %", "raw vs default qcow2, guest ext4: every simultaneous CI within x1.2 either way",
          _r3_cost(("dd-overwrite", "mobibench-append", "mobibench-overwrite", "varmail", "ycsb-insert",
                    "ycsb-update"))),
    Claim("R4-four-groups", "R4", "cgroup-weights", "weights 100/200/400/800 split the disk 1 : 2.03 : 4.08 : 8.12",
          "at N = 4 every class ratio's 95 % CI meets R4's ratio ±15 %", _r4_four),
    Claim("R4-beside-app", "R4", "cgroup-weights", "the split holds with YCSB-RocksDB running beside the groups",
          "class ratios beside the application hold (±15 %)", _r4_beside_app),
    Claim("R4-holds-16", "R4", "cgroup-weights", "the ratios hold for 4, 8 and 16 groups",
          "worst share error below log2(1.5) at N = 8 and 16", _r4_upto16),
    Claim("R4-breaks-32", "R4", "cgroup-weights", "the ratios break down from 32 groups on",
          "the first N whose worst share error exceeds log2(1.5) is 32", _r4_breaks32),
    Claim("R5-cpu-equal", "R5", "vm-profile", "CPU performance is equal in both modes",
          "encrypted/performance CPU scores: every CI meets 0.95–1.05", _r5_part("cpu", CPU)),
    Claim("R5-memory-better", "R5", "vm-profile", "memory bandwidth is better without encryption (signing)",
          "encrypted/performance STREAM bandwidth below 1", _r5_part("memory", MEMORY)),
    Claim("R5-disk-better", "R5", "vm-profile", "disk IOPS are better without encryption",
          "encrypted/performance IOPS: every CI below 1", _r5_part("disk", DISK)),
]


def evaluate(children: dict[str, Doc], quick: bool) -> list[dict[str, Any]]:
    """One row per claim: the claim, this machine's value, the verdict and the reason."""
    rows = []
    for c in CLAIMS:
        doc = children.get(c.study)
        v = _not_run(doc, c.study) or _safe(c, doc, quick)
        rows.append({"id": c.id, "reference": c.reference, "study": c.study, "claim": c.text, "rule": c.rule,
                     **v.as_dict(), "run_id": doc.get("run_id") if doc else None})
    return rows


def _safe(c: Claim, doc: Doc | None, quick: bool) -> Verdict:
    assert doc is not None
    try:
        return c.evaluate(doc, quick)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:  # a malformed stored doc: say so
        return Verdict(UNTESTABLE, "–", f"could not evaluate from the stored results ({type(exc).__name__}: {exc})")



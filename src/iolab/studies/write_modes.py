"""Study write-modes (R2): O_SYNC, O_DIRECT, mmap and buffered writes as the block size grows.

A native helper does all four modes the same way (fio cannot express R2's mmap writes);
its o_sync and o_direct numbers are cross-checked against fio in the same run.
"""

from __future__ import annotations

from typing import Any

from iolab.analysis.stats import harmonic_mean_ci, knee
from iolab.report.model import Chart, Note, Section, Series, Table
from iolab.studies.common import flags_by, fmt_est, group_values, nested, ok_trials, size_label

NAME = "write-modes"
SUMMARY = "R2: buffered, O_SYNC, O_DIRECT and mmap writes vs block size 512 B..1 MiB; knee per mode"
MODES = ["buffered", "o_sync", "o_direct", "mmap"]
KNEE_FRACTION = 0.9


def build(quick: bool) -> dict[str, Any]:
    sizes = [512, 4096, 65536, 1 << 20] if quick else [512 << i for i in range(12)]
    data = "2M" if quick else "5M"
    check_bs = [4096] if quick else [4096, 65536]
    return {
        "study": {"name": NAME, "analysis": NAME, "repetitions": 3, "max_repetitions": 3 if quick else 8,
                  "ci_target": 0.1, "description": SUMMARY},
        "target": {"kind": "loop", "size": "256M", "filesystem": "ext4"},
        "workloads": [
            {"name": "helper", "kind": "writemode", "mode": MODES, "bs": sizes, "size": data},
            _fio_check("fio-o_direct", check_bs, data, direct=True),
            _fio_check("fio-o_sync", check_bs, data, direct=False),
        ],
    }


def _fio_check(name: str, bs: list[int], data: str, *, direct: bool) -> dict[str, Any]:
    return {"name": name, "kind": "fio", "rw": "write", "bs": bs, "size": data, "runtime": 0, "ramp_time": 0,
            "ioengine": "psync", "direct": direct, "sync": not direct, "end_fsync": True}


def _fio_mode(p: dict[str, Any]) -> str | None:
    w = p.get("_workload", {})
    if w.get("direct") and not w.get("sync"):
        return "o_direct"
    if w.get("sync") and not w.get("direct"):
        return "o_sync"
    return None


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    trials = ok_trials(doc)
    helper = [t for t in trials if t["params"].get("_workload", {}).get("kind") == "writemode"]
    for t in helper:
        t["params"]["mode"] = t["params"]["_workload"]["mode"]
        t["params"]["bs"] = t["params"]["_workload"]["bs"]
    thr = group_values(helper, ["mode", "bs"], "throughput_mib_s")
    sps = group_values(helper, ["mode", "bs"], "syscalls_per_s")
    throughput = nested(thr, harmonic_mean_ci, "MiB/s")  # rates over a fixed amount of data
    knees = {}
    for mode, per_bs in throughput.items():
        xs = [int(b) for b in per_bs]
        knees[mode] = knee(xs, [per_bs[str(b)]["mean"] for b in xs], KNEE_FRACTION)
    flags = {f"{m}/{b}": f for (m, b), f in flags_by(helper, ["mode", "bs"]).items()}
    return {
        "throughput": throughput,
        "syscalls_per_s": nested(sps, harmonic_mean_ci, "calls/s"),
        "knee": knees,
        "knee_fraction": KNEE_FRACTION,
        "mode_flags": flags,
        "fio_crosscheck": _crosscheck(trials, throughput),
    }


def _crosscheck(trials: list[dict[str, Any]], throughput: dict[str, Any]) -> list[dict[str, Any]]:
    """fio doing the same o_sync / o_direct writes: same order of magnitude or something is wrong."""
    fio = [t for t in trials if t["params"].get("_workload", {}).get("kind") == "fio"]
    groups: dict[tuple, list[float]] = {}
    for t in fio:
        mode = _fio_mode(t["params"])
        if mode:
            groups.setdefault((mode, t["params"]["_workload"]["bs"]), []).append(t["metrics"]["write_bw_mib_s"])
    out = []
    for (mode, bs), vals in sorted(groups.items()):
        est = harmonic_mean_ci(vals).as_dict("MiB/s")
        helper = throughput.get(mode, {}).get(str(bs))
        ratio = helper["mean"] / est["mean"] if helper and est["mean"] else None
        out.append({"mode": mode, "bs": bs, "fio": est, "helper": helper, "helper_over_fio": ratio,
                    "agrees": ratio is not None and 1 / 3 <= ratio <= 3})
    return out


def present(doc: dict[str, Any], f: dict[str, Any]) -> tuple[list[str], list[Section]]:
    thr = f["throughput"]
    modes = [m for m in MODES if m in thr]
    sizes = sorted({int(b) for m in modes for b in thr[m]})
    summary = []
    if "o_sync" in thr and sizes:
        lo, hi = thr["o_sync"].get(str(sizes[0])), thr["o_sync"].get(str(sizes[-1]))
        if lo and hi and lo["mean"]:
            summary.append(f"O_SYNC at {size_label(sizes[-1])} blocks is {hi['mean'] / lo['mean']:.0f}x its "
                           f"throughput at {size_label(sizes[0])} (R2: 512 B took 29x as long as 16 KiB)")
    for m in modes:
        if f["knee"].get(m):
            summary.append(f"{m}: 90% of its best throughput from {size_label(f['knee'][m])} blocks on")
    chart = Chart("Write throughput vs block size", "line", "block size (bytes)", "MiB/s",
                  [_series(m, thr[m], sizes) for m in modes], x_log2=True, y_log=True,
                  notes=[Note("Harmonic mean over repetitions (a fixed amount of data per trial) with 95% CI band.")])
    sps = f["syscalls_per_s"]
    chart2 = Chart("Write calls per second vs block size", "line", "block size (bytes)", "calls/s",
                   [_series(m, sps[m], sizes) for m in modes if m in sps], x_log2=True, y_log=True,
                   notes=[Note("With a fixed number of calls per second, time is set by calls, not bytes: "
                               "why larger blocks win until the device, not the call count, is the limit.")])
    rows = [[m] + [fmt_est(thr[m].get(str(b))) for b in sizes] + [size_label(f["knee"][m]) if f["knee"].get(m)
                                                                   else "–"] for m in modes]
    notes = [Note(f"{k}: {'; '.join(v)}", "warn") for k, v in f["mode_flags"].items()]
    table = Table("Throughput, MiB/s (mean ± 95% CI)", ["mode"] + [size_label(b) for b in sizes] + ["knee"], rows,
                  notes=notes)
    cc = f["fio_crosscheck"]
    cc_rows = [[c["mode"], size_label(c["bs"]), fmt_est(c["helper"]), fmt_est(c["fio"]),
                f"{c['helper_over_fio']:.2f}" if c["helper_over_fio"] else "–", "yes" if c["agrees"] else "NO"]
               for c in cc]
    cc_table = Table("Cross-check against fio (same mode, block size and data size)",
                     ["mode", "bs", "iolab helper", "fio", "helper/fio", "agrees (within 3x)"], cc_rows)
    sections = [Section("Throughput by write mode", [chart, table], intro=(
        "Each trial writes the same amount of data to a new file on ext4 on iolab's scratch loop device; "
        "the time includes what each mode pays for durability (fsync for buffered and O_DIRECT, msync for mmap).")),
        Section("System calls", [chart2]),
        Section("Cross-check", [cc_table])]
    return summary, sections


def _series(mode: str, per_bs: dict[str, Any], sizes: list[int]) -> Series:
    pts = [per_bs.get(str(b)) for b in sizes]
    return Series(mode, [float(b) for b in sizes], [p["mean"] if p else None for p in pts],
                  [p["ci95"][0] if p else None for p in pts], [p["ci95"][1] if p else None for p in pts])

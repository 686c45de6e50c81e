"""write-modes' cross-check: iolab's helper against fio doing the same writes, with the cause of
any disagreement taken from what was measured.

Like for like: both append to a new file (the fio trials run with `fresh_file`), with the same
mode, block size and amount of data. Each side's evidence comes from its own trials: the
file's layout (append, or overwrite of bytes that existed), journal commits per write (probe
`fs_journal`), device flushes per write (probe `host_disk`) and the confounders flagged. The
verdict comes from the 95 % CI of the throughput ratio: `agrees` when the whole interval lies
within ±25 % (0.80–1.25), `differs` when it lies wholly outside, `inconclusive` otherwise.
Every row carries a reason in words, built only from those measurements.

Pure: works on the results document (docs/results.md), so it is tested on stored data.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from iolab.analysis.sequential import RunEstimator, aggregate_ratio
from iolab.analysis.stats import harmonic_mean_ci, ratio_ci, ratio_with_resolution, with_resolution
from iolab.analysis.trials import relative_resolution

TOLERANCE = 0.25  # agreement band: helper/fio within [1/1.25, 1.25]
SAME_RATE = 0.2   # commits (or flushes) per write closer than this (relative) count as the same


def fio_mode(workload: dict[str, Any]) -> str | None:
    if workload.get("direct") and not workload.get("sync"):
        return "o_direct"
    if workload.get("sync") and not workload.get("direct"):
        return "o_sync"
    return None


def _side(trials: list[dict[str, Any]], writes_metric: str, layout_of: Any) -> dict[str, Any]:
    """Evidence of one side: per-write rates from probe counts, layout, flags."""
    commits: list[float] = []
    flushes: list[float] = []
    writes: list[float] = []
    layouts: set[str] = set()
    flags: set[str] = set()
    for t in trials:
        n = t["metrics"].get(writes_metric)
        if not n:
            continue
        writes.append(n)
        j = (t.get("probes") or {}).get("fs_journal") or {}
        if "commits" in j:
            commits.append(j["commits"] / n)
        d = (t.get("probes") or {}).get("host_disk") or {}
        if "flushes" in d:
            flushes.append(d["flushes"] / n)
        layouts.add(layout_of(t))
        flags.update(f.split(":")[0] for f in t.get("flags") or [])
    return {
        "writes_per_trial": sum(writes) / len(writes) if writes else None,
        "commits_per_write": sum(commits) / len(commits) if commits else None,
        "flushes_per_write": sum(flushes) / len(flushes) if flushes else None,
        "layout": layouts.pop() if len(layouts) == 1 else ("mixed" if layouts else None),
        "flags": sorted(flags),
        "n": len(trials),
    }


def _helper_layout(t: dict[str, Any]) -> str:
    return "append"  # the helper always creates a new file (O_CREAT|O_TRUNC on a unique name)


def _fio_layout(t: dict[str, Any]) -> str:
    before = ((t.get("manifest") or {}).get("workload_facts") or {}).get("data_file_bytes_before")
    if before is None:
        return "unknown"
    return f"overwrite:{before}" if before > 0 else "append"


def crosscheck(trials: list[dict[str, Any]], helper_trials: list[dict[str, Any]],
               est: RunEstimator | None = None) -> list[dict[str, Any]]:
    """One row per (mode, bs) that fio cross-checked, with verdict, reason and evidence. `est`: the
    run's estimator (intervals widened for its adaptive stopping); None: fixed-n intervals."""
    fio: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for t in trials:
        w = t["params"].get("_workload", {})
        if w.get("kind") == "fio" and fio_mode(w) and "write_bw_mib_s" in t["metrics"]:
            fio[(str(fio_mode(w)), int(w["bs"]))].append(t)
    helper: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for t in helper_trials:
        w = t["params"]["_workload"]
        helper[(w["mode"], int(w["bs"]))].append(t)
    rows = []
    for key in sorted(fio):
        mode, bs = key
        f_trials, h_trials = fio[key], helper.get(key, [])
        f_vals = [t["metrics"]["write_bw_mib_s"] for t in f_trials]
        h_vals = [t["metrics"]["throughput_mib_s"] for t in h_trials]
        harmonic = est.harmonic if est else harmonic_mean_ci
        f_rel = relative_resolution(f_trials, "write_bw_mib_s")  # fio's millisecond clock (the helper's is ns)
        row: dict[str, Any] = {"mode": mode, "bs": bs, "fio": with_resolution(harmonic(f_vals), f_rel).as_dict("MiB/s"),
                               "helper": harmonic(h_vals).as_dict("MiB/s") if h_vals else None}
        ratio = _ratio(h_vals, f_vals, est, f_rel)
        row["helper_over_fio"] = ratio
        row["evidence"] = {"helper": _side(h_trials, "calls", _helper_layout),
                           "fio": _side(f_trials, "write_ios", _fio_layout)}
        row["verdict"] = verdict(ratio)
        row["agrees"] = row["verdict"] == "agrees"
        row["reason"] = reason(mode, bs, row["verdict"], ratio, row["evidence"], h_vals, f_vals)
        rows.append(row)
    return rows


def _ratio(h_vals: list[float], f_vals: list[float], est: RunEstimator | None, f_rel: float) -> dict[str, Any] | None:
    """helper/fio of harmonic means = mean time per byte of fio / that of the helper, with its CI
    (widened by fio's clock error `f_rel`)."""
    if not h_vals or not f_vals or min(h_vals + f_vals) <= 0:
        return None
    r = aggregate_ratio("harmonic", h_vals, f_vals, est.ratio if est else ratio_ci)
    return ratio_with_resolution(r, 0.0, f_rel).as_dict()


def verdict(ratio: dict[str, Any] | None) -> str:
    if not ratio or ratio.get("mean") is None:
        return "inconclusive"
    lo, hi = ratio["ci95"]
    band = (1 / (1 + TOLERANCE), 1 + TOLERANCE)
    if lo is not None and hi is not None and band[0] <= lo and hi <= band[1]:
        return "agrees"
    if (lo is not None and lo > band[1]) or (hi is not None and hi < band[0]):
        return "differs"
    return "inconclusive"


def _layout_words(layout: str | None) -> str:
    if layout == "append":
        return "appended to a new file"
    if layout and layout.startswith("overwrite:"):
        return f"overwrote a laid-out file ({int(layout.split(':')[1]) / (1 << 20):g} MiB existed before the trial)"
    return f"wrote with an unknown layout ({layout})"


def _differ(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return False
    return abs(a - b) > SAME_RATE * max(abs(a), abs(b)) and abs(a - b) > 0.01


def causes(mode: str, evidence: dict[str, Any]) -> list[str]:
    """Measured differences between the two sides that would change the throughput."""
    h, f = evidence["helper"], evidence["fio"]
    out = []
    if h["layout"] != f["layout"]:
        out.append(f"the helper {_layout_words(h['layout'])} while fio {_layout_words(f['layout'])}")
    if _differ(h["commits_per_write"], f["commits_per_write"]):
        why = (" (a synchronous write that extends a file also commits the inode's size)"
               if mode == "o_sync" and "append" in (h["layout"], f["layout"]) else "")
        out.append(f"the journal committed {per_write(h['commits_per_write'])} for the helper and "
                   f"{per_write(f['commits_per_write'])} for fio{why}")
    if _differ(h["flushes_per_write"], f["flushes_per_write"]):
        out.append(f"the device saw {per_write(h['flushes_per_write'], 'flush')} for the helper and "
                   f"{per_write(f['flushes_per_write'], 'flush')} for fio")
    for side, ev in (("helper", h), ("fio", f)):
        if ev["flags"]:
            out.append(f"the {side}'s trials were flagged {', '.join(ev['flags'])}")
    return out


def reason(mode: str, bs: int, v: str, ratio: dict[str, Any] | None, evidence: dict[str, Any],
           h_vals: list[float], f_vals: list[float]) -> str:
    """One or two sentences, from measurements only."""
    found = causes(mode, evidence)
    h, f = evidence["helper"], evidence["fio"]
    same = f"both {_layout_words(h['layout'])}" if h["layout"] == f["layout"] else ""
    if h["commits_per_write"] is not None and not _differ(h["commits_per_write"], f["commits_per_write"]):
        same += f"{', ' if same else ''}journal commits {per_write(h['commits_per_write'], '')} on each side"
    if v == "agrees":
        return f"like for like ({same or 'same mode, block size and data'}); within ±{TOLERANCE:.0%}"
    if not ratio or ratio.get("mean") is None:
        return "no ratio: one side has no successful trial"
    lo, hi = ratio["ci95"]
    span = f"helper/fio {ratio['mean']:.2f} [{_f(lo)}, {_f(hi)}] from {len(h_vals)} and {len(f_vals)} trials"
    if v == "inconclusive":
        tail = f"; measured differences: {'; '.join(found)}" if found else f" ({same})" if same else ""
        return f"too noisy to decide: {span}; agreement needs the whole interval within 0.80–1.25{tail}"
    if found:
        return f"{span}: " + "; ".join(found)
    per_call = [1e6 * bs / (hm * (1 << 20)) if hm else None for hm in (_hm(h_vals), _hm(f_vals))]
    calls = (f" (helper {per_call[0]:.0f} µs per write, fio {per_call[1]:.0f} µs)"
             if None not in per_call else "")
    return (f"{span} with the same layout and the same journal commits and flushes per write ({same}): "
            f"the difference is in the time per call{calls}, not in what reached the disk")


def per_write(rate: float, noun: str = "time") -> str:
    """'1.00 times per write', or '1 time per 512 writes' when rarer than one in ten."""
    plural = {"time": "times", "flush": "flushes", "": ""}[noun]
    if rate >= 0.1 or rate == 0:
        return f"{rate:.2f} {plural} per write".replace("  ", " ")
    return f"1 {noun} per {1 / rate:.0f} writes".replace("  ", " ")


def _hm(vals: list[float]) -> float | None:
    est = harmonic_mean_ci(vals)
    return est.mean if est.n and math.isfinite(est.mean) else None


def _f(x: float | None) -> str:
    return "∞" if x is None else f"{x:.2f}"

"""write-modes' cross-check: iolab's helper against fio doing the same writes, with the cause of
any disagreement taken from what was measured.

Like for like: both append to a new file (the fio trials run with `fresh_file`), with the same
mode, block size and amount of data. Each side's evidence comes from its own trials: the
file's layout (append, or overwrite of bytes that existed), journal commits per write (probe
`fs_journal`), device flushes per write (probe `host_disk`) and the confounders flagged. The
verdict (analysis/verdicts.py) comes from the interval of the throughput ratio (of the two
medians): `holds` (the helper agrees with fio) when the whole interval lies within ±25 %
(0.80–1.25), `differs` when it lies wholly outside, `undecided` otherwise, with how many
more repetitions would likely decide it. The rows are one family: each interval is computed
at 1/rows of the design's tail (Bonferroni). Every row carries a reason in words, built only
from those measurements.

Pure: works on the results document (docs/results.md), so it is tested on stored data.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import ClassVar

from iolab.analysis.record import Decided, Est, Quantity, Record, finite_or_none, parse_estimate
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import Estimate, harmonic_mean_ci
from iolab.analysis.trials import Params, Trial, relative_resolution
from iolab.analysis.verdicts import HOLDS, UNDECIDED, Band, config_ids_of, more_needed

TOLERANCE = 0.25  # agreement band: helper/fio within [1/1.25, 1.25]
SAME_RATE = 0.2   # commits (or flushes) per write closer than this (relative) count as the same


def fio_mode(workload: Params) -> str | None:
    if workload.get("direct") and not workload.get("sync"):
        return "o_direct"
    if workload.get("sync") and not workload.get("direct"):
        return "o_sync"
    return None


class Side(Record):
    """One side's evidence: per-write rates from probe counts, the file's layout, its flags."""

    writes_per_trial: float | None
    commits_per_write: float | None
    flushes_per_write: float | None
    layout: str | None
    flags: list[str]
    n: int


class Evidence(Record):
    helper: Side
    fio: Side


class CrossCheck(Record):
    """One (mode, bs) fio cross-checked: both sides' throughput, their ratio and its verdict, the
    evidence and the reason in words (and, when undecided, what would decide it)."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset({"decide"})

    mode: str
    bs: int
    fio: Est
    helper: Est | None
    helper_over_fio: Est | None
    evidence: Evidence
    verdict: str
    agrees: bool
    reason: str
    decide: Decided | None = None


def _side(trials: list[Trial], writes_metric: str, layout_of: Callable[[Trial], str]) -> Side:
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
    return Side(writes_per_trial=sum(writes) / len(writes) if writes else None,
                commits_per_write=sum(commits) / len(commits) if commits else None,
                flushes_per_write=sum(flushes) / len(flushes) if flushes else None,
                layout=layouts.pop() if len(layouts) == 1 else ("mixed" if layouts else None),
                flags=sorted(flags), n=len(trials))


def _helper_layout(t: Trial) -> str:
    return "append"  # the helper always creates a new file (O_CREAT|O_TRUNC on a unique name)


def _fio_layout(t: Trial) -> str:
    before = ((t.get("manifest") or {}).get("workload_facts") or {}).get("data_file_bytes_before")
    if before is None:
        return "unknown"
    return f"overwrite:{before}" if before > 0 else "append"


BAND = Band(1 / (1 + TOLERANCE), 1 + TOLERANCE)


def crosscheck(trials: list[Trial], helper_trials: list[Trial], est: RunEstimator | None = None) -> list[CrossCheck]:
    """One row per (mode, bs) that fio cross-checked, with verdict, reason and evidence. `est`: the
    run's estimator (its looks); the rows are read as one family (Bonferroni over them)."""
    fio: dict[tuple[str, int], list[Trial]] = defaultdict(list)
    for t in trials:
        w = t["params"].get("_workload", {})
        if w.get("kind") == "fio" and fio_mode(w) and "write_bw_mib_s" in t["metrics"]:
            fio[(str(fio_mode(w)), int(w["bs"]))].append(t)
    helper: dict[tuple[str, int], list[Trial]] = defaultdict(list)
    for t in helper_trials:
        w = t["params"]["_workload"]
        helper[(w["mode"], int(w["bs"]))].append(t)
    family = (est or RunEstimator({})).widened(max(len(fio), 1))
    rows = []
    for key in sorted(fio):
        mode, bs = key
        f_trials, h_trials = fio[key], helper.get(key, [])
        f_vals = [t["metrics"]["write_bw_mib_s"] for t in f_trials]
        h_vals = [t["metrics"]["throughput_mib_s"] for t in h_trials]
        f_rel = relative_resolution(f_trials, "write_bw_mib_s")  # fio's millisecond clock (the helper's is ns)
        ratio = _ratio(h_vals, f_vals, family, f_rel)
        evidence = Evidence(helper=_side(h_trials, "calls", _helper_layout),
                            fio=_side(f_trials, "write_ios", _fio_layout))
        said = verdict(ratio)
        why = reason(mode, bs, said, ratio, evidence, h_vals, f_vals)
        decision = None
        if said == UNDECIDED and h_vals and f_vals:
            decision = more_needed(BAND, family.ratio_ahead(h_vals, f_vals),
                                   min(len(h_vals), len(f_vals)), (f"helper {mode} bs={bs}", f"fio {mode} bs={bs}"),
                                   config_ids_of(h_trials + f_trials))
            why += "; " + decision.words()
        rows.append(CrossCheck(
            mode=mode, bs=bs, fio=Quantity.of(family.estimate(f_vals, rel=f_rel), "MiB/s"),
            helper=Quantity.of(family.estimate(h_vals), "MiB/s") if h_vals else None, helper_over_fio=ratio,
            evidence=evidence, verdict=said, agrees=said == HOLDS, reason=why, decide=decision))
    return rows



def _ratio(h_vals: list[float], f_vals: list[float], est: RunEstimator, f_rel: float) -> Estimate | None:
    """helper/fio of the two medians with its interval (widened by fio's clock error `f_rel`); a
    stall on either side is in the ratio (counted in `zeros`)."""
    if not h_vals or not f_vals:
        return None
    return est.ratio(h_vals, f_vals, (0.0, f_rel))


def verdict(ratio: Estimate | Mapping[str, object] | None) -> str:
    """holds (agrees within ±25 %) / differs / undecided by where the interval lies."""
    e = None if ratio is None else parse_estimate(ratio)
    if e is None or finite_or_none(e.mean) is None:
        return UNDECIDED
    hi = finite_or_none(e.hi)
    return BAND.decide(finite_or_none(e.lo), math.inf if hi is None else hi)


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


def causes(mode: str, evidence: Evidence) -> list[str]:
    """Measured differences between the two sides that would change the throughput."""
    h, f = evidence.helper, evidence.fio
    out = []
    if h.layout != f.layout:
        out.append(f"the helper {_layout_words(h.layout)} while fio {_layout_words(f.layout)}")
    if _differ(h.commits_per_write, f.commits_per_write):
        why = (" (a synchronous write that extends a file also commits the inode's size)"
               if mode == "o_sync" and "append" in (h.layout, f.layout) else "")
        out.append(f"the journal committed {per_write(h.commits_per_write)} for the helper and "
                   f"{per_write(f.commits_per_write)} for fio{why}")
    if _differ(h.flushes_per_write, f.flushes_per_write):
        out.append(f"the device saw {per_write(h.flushes_per_write, 'flush')} for the helper and "
                   f"{per_write(f.flushes_per_write, 'flush')} for fio")
    for side, ev in (("helper", h), ("fio", f)):
        if ev.flags:
            out.append(f"the {side}'s trials were flagged {', '.join(ev.flags)}")
    return out


def reason(mode: str, bs: int, v: str, ratio: Estimate | None, evidence: Evidence,
           h_vals: list[float], f_vals: list[float]) -> str:
    """One or two sentences, from measurements only."""
    found = causes(mode, evidence)
    h, f = evidence.helper, evidence.fio
    same = f"both {_layout_words(h.layout)}" if h.layout == f.layout else ""
    if h.commits_per_write is not None and not _differ(h.commits_per_write, f.commits_per_write):
        same += f"{', ' if same else ''}journal commits {per_write(h.commits_per_write, '')} on each side"
    if v == HOLDS:
        return f"like for like ({same or 'same mode, block size and data'}); within ±{TOLERANCE:.0%}"
    if ratio is None or finite_or_none(ratio.mean) is None:
        return "no ratio: one side has no successful trial"
    lo, hi = finite_or_none(ratio.lo), finite_or_none(ratio.hi)
    span = f"helper/fio {ratio.mean:.2f} [{_f(lo)}, {_f(hi)}] from {len(h_vals)} and {len(f_vals)} trials"
    if v == UNDECIDED:
        tail = f"; measured differences: {'; '.join(found)}" if found else f" ({same})" if same else ""
        return f"undecided: {span}; agreement needs the whole interval within 0.80–1.25{tail}"
    if found:
        return f"{span}: " + "; ".join(found)
    per_call = [1e6 * bs / (hm * (1 << 20)) if hm else None for hm in (_hm(h_vals), _hm(f_vals))]
    calls = (f" (helper {per_call[0]:.0f} µs per write, fio {per_call[1]:.0f} µs)"
             if None not in per_call else "")
    return (f"{span} with the same layout and the same journal commits and flushes per write ({same}): "
            f"the difference is in the time per call{calls}, not in what reached the disk")


def per_write(rate: float | None, noun: str = "time") -> str:
    """'1.00 times per write', or '1 time per 512 writes' when rarer than one in ten."""
    plural = {"time": "times", "flush": "flushes", "": ""}[noun]
    assert rate is not None  # callers compare two known rates
    if rate >= 0.1 or rate == 0:
        return f"{rate:.2f} {plural} per write".replace("  ", " ")
    return f"1 {noun} per {1 / rate:.0f} writes".replace("  ", " ")


def _hm(vals: list[float]) -> float | None:
    est = harmonic_mean_ci(vals)  # mean time per byte: what a call costs on average
    return est.mean if est.n and math.isfinite(est.mean) else None


def _f(x: float | None) -> str:
    return "∞" if x is None else f"{x:.2f}"

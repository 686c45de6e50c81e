"""The confounders one fio-groups trial can show, from its metrics (pure).

Each flag names what may have decided the shares instead of the I/O controller: the CPU
scheduler (generator CPU-bound), a window that never settled, kernel and fio disagreeing,
a slow start, too few I/Os to count, or scheduler tags (BFQ's per-group request limit)."""

from __future__ import annotations

import math

CPU_BOUND = 0.90  # machine CPU busy fraction (of all cores) above which the generator cannot keep up


def trial_flags(m: dict[str, float], steady: bool, cores: int) -> list[str]:
    """CPU, steadiness, counting and start-up confounders of one trial's window."""
    flags = []
    if m["machine_cpu_busy"] >= CPU_BOUND and m["generator_cpu_busy"] >= 0.5 * m["machine_cpu_busy"]:
        flags.append(f"generator_cpu_bound: the CPUs were {m['machine_cpu_busy']:.0%} busy in the window, "
                     f"fio {m['generator_cpu_busy']:.0%} of {cores} cores: the CPU scheduler, not the I/O "
                     "controller, may decide who submits")
    elif m["machine_cpu_busy"] >= CPU_BOUND:
        flags.append(f"cpu_saturated: the CPUs were {m['machine_cpu_busy']:.0%} busy in the window but fio used "
                     f"only {m['generator_cpu_busy']:.0%} of {cores} cores: other load (or the I/O path) took the CPUs")
    if not steady:
        flags.append(f"not_steady: class shares still drifted {m['steady_drift']:.0%} over the window")
    if abs(m["kernel_vs_fio"] - 1) > 0.05 or m["kernel_vs_fio_worst_group"] > 0.05:
        flags.append(f"kernel_fio_disagree: kernel counted {m['kernel_vs_fio']:.3f}x fio's I/Os "
                     f"(worst group off by {m['kernel_vs_fio_worst_group']:.1%})")
    if m["start_spread_s"] > 2:
        flags.append(f"slow_start: the {m['groups']:.0f} fio processes ran together only {m['start_spread_s']:.1f} s "
                     f"after release (generator CPU over its whole life: {m['generator_cpu_busy_lifetime']:.0%} of "
                     f"{cores} cores); the window starts after that")
    if m["min_group_ios"] < 100:
        flags.append(f"short_window: the smallest group completed only {m['min_group_ios']:.0f} I/Os in the window "
                     f"(counting noise ~{1 / math.sqrt(max(m['min_group_ios'], 1)):.0%})")
    return flags


def tag_limits(weights: dict[str, int], nr_req: int) -> dict[str, int]:
    """BFQ's per-group request limit under tag pressure (bfqq_request_over_limit, Linux >= 5.17):
    nr_requests x weight / sum of the active siblings' weights. A group holding that many
    requests gets its tag depth trimmed to 1."""
    wsum = sum(weights.values())
    return {g: max(int(round(nr_req * w / wsum)), 1) for g, w in weights.items()}


def tag_flags(m: dict[str, float], weights: dict[str, int], iodepth: int, nr_req: int | None,
              bfq: bool) -> list[str]:
    """Flag tag pressure: all groups together want more requests than the queue has."""
    if not nr_req:
        return []
    flags = []
    if m["iodepth_total"] >= nr_req:
        flags.append(f"tag_pressure: iodepth x N = {m['iodepth_total']:.0f} >= nr_requests = {nr_req}: requests "
                     "wait for a scheduler tag before the scheduler sees them")
    limits = tag_limits(weights, nr_req)
    low = min(limits.values())
    if bfq and low <= iodepth and low < 16:
        trimmed = {w: limits[g] for g, w in sorted(weights.items(), key=lambda kv: kv[1]) if limits[g] <= iodepth}
        flags.append(f"tag_limited: BFQ limits each group to nr_requests x w / sum w requests and trims the tag "
                     f"depth of a group above it to 1; limits {trimmed} (weight: requests) are at or below iodepth "
                     f"{iodepth}, too few to stay backlogged through a service slot")
    return flags

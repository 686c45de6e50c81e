"""`iolab history`'s analysis of a family, with its memos and its fast bootstrap
(analysis/changepoints.py: `candidate_set`, `_correlation_sums`; analysis/innovations.py:
`_kelly_resampled`) against the same code with them bypassed, and the simulation of one set of
nulls with `null_maxima` against the statistic's own code, side by side in one run.

The work is `changepoints.analyse` on families of 30 configurations × 20 runs (half with normal
noise between runs, half lognormal σ = 0.5: the skewed shape whose fit runs the bootstrap), the
nulls already simulated, as every analysis after a history's first finds them. The memos are
emptied before every family, so only the reuse within one analysis counts, as in one `iolab
history`. The nulls: the sorted maxima of 20 000 simulated AR(1) series of 20 runs (ρ 0.3), what
a cold history simulates for each length and noise model it meets. Both sides must find exactly
the same (the nulls to 1e-12); rounds alternate the order of the two sides; a round's ratio is
fast / bypassed.

Last lines (analysis, then nulls):
    history-speed fast seconds=<mean> [lo, hi] s n=<rounds>
    history-speed bypassed seconds=...
    history-speed ratio fast/bypassed=<geometric mean> [lo, hi] n=<rounds>
    history-speed nulls fast seconds=...
    history-speed nulls bypassed seconds=...
    history-speed nulls ratio fast/bypassed=<geometric mean> [lo, hi] n=<rounds>

    bench/run history-speed [--families N] [--max-rounds N] [--target 0.05] [--budget S]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator

import numpy as np
from figures import (
    Busy,
    Figure,
    add_round_arguments,
    print_side_by_side,
    ratio_figure,
    stop_on_signals,
    stopping,
    until_narrow,
)

from iolab.analysis import changepoints, innovations

SIDES = ("fast", "bypassed")
MEMOS = ("candidate_set", "_correlation_sums")


def _candidate_set_uncached(n: int, rho: float, circular: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    i, j = changepoints.candidates(n, circular)
    return i, j, changepoints.interval_variance(n, rho, i, j)


@contextlib.contextmanager
def fast(on: bool) -> Iterator[None]:
    """The memos as shipped (emptied) and the counting bootstrap, or what they replace."""
    kept = {name: getattr(changepoints, name) for name in MEMOS}
    resampled = innovations._kelly_resampled
    try:
        for memo in kept.values():
            memo.cache_clear()
        if not on:
            changepoints.candidate_set = _candidate_set_uncached  # type: ignore[assignment]
            changepoints._correlation_sums = kept["_correlation_sums"].__wrapped__  # type: ignore[assignment]
            innovations._kelly_resampled = lambda x, idx: innovations._kelly(x[idx])
        yield
    finally:
        for name, memo in kept.items():
            setattr(changepoints, name, memo)
        innovations._kelly_resampled = resampled


def families(count: int, seed: int = 41) -> list[dict[str, np.ndarray]]:
    """`count` flat families of 30 configurations × 20 runs, alternately normal and lognormal noise."""
    rng = np.random.default_rng(seed)
    out = []
    for f in range(count):
        noise = rng.standard_normal((30, 20)) if f % 2 == 0 else rng.lognormal(0.0, 0.5, (30, 20))
        out.append({f"config-{c}": 1000 * np.exp(0.01 * noise[c] * (1 + c % 3)) for c in range(30)})
    return out


def analyse_all(fams: list[dict[str, np.ndarray]], on: bool) -> tuple[float, list[str]]:
    """Seconds to analyse every family (memos emptied before each), and what each analysis found."""
    found, seconds = [], 0.0
    for fam in fams:
        with fast(on):
            t0 = time.perf_counter()
            result = changepoints.analyse(fam)
            seconds += time.perf_counter() - t0
        found.append(repr(result))
    return seconds, found


def nulls(on: bool) -> tuple[float, np.ndarray]:
    """Seconds to simulate one set of nulls (not cached), and the sorted maxima."""
    kept = changepoints.null_maxima
    try:
        if not on:
            changepoints.null_maxima = (  # type: ignore[assignment]
                lambda x, i, j, var, block=0: changepoints.statistics(x, i, j, var).max(axis=-1))
        t0 = time.perf_counter()
        null = changepoints.segment_null.__wrapped__(20, 0.3, True, changepoints.NULL_SERIES)
        return time.perf_counter() - t0, null
    finally:
        changepoints.null_maxima = kept  # type: ignore[assignment]


def main() -> None:
    stop_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", type=int, default=8, help="families per side and round (default 8)")
    add_round_arguments(ap, max_rounds=20, target=0.05, budget=300)
    args = ap.parse_args()
    if args.max_rounds < 5 or not 2 <= args.families <= 1000:
        ap.error("--max-rounds at least 5, --families 2..1000")
    fams = families(args.families)
    warm = [analyse_all(fams, on)[1] for on in (True, False)]  # simulates the nulls once, for both sides
    if warm[0] != warm[1]:
        raise SystemExit("the fast analysis found something else than the bypassed one")
    a, b = nulls(True)[1], nulls(False)[1]
    if not np.allclose(a, b, rtol=1e-12, atol=0):
        raise SystemExit("the fast nulls differ from the statistic's own")
    print(f"{len(fams)} families of 30 configurations x 20 runs (normal and lognormal noise); "
          "both sides find the same, to the last digit; the nulls agree to 1e-12", flush=True)
    times: dict[str, list[float]] = {s: [] for s in SIDES}
    null_times: dict[str, list[float]] = {s: [] for s in SIDES}
    ratios: list[float] = []
    null_ratios: list[float] = []
    busy = Busy()

    def round_(i: int) -> None:
        for side in (SIDES if i % 2 == 0 else SIDES[::-1]):
            busy.start()
            times[side].append(analyse_all(fams, side == "fast")[0])
            null_times[side].append(nulls(side == "fast")[0])
            busy.stop()
        ratios.append(times["fast"][-1] / times["bypassed"][-1])
        null_ratios.append(null_times["fast"][-1] / null_times["bypassed"][-1])
        print(f"round {i + 1}: analysis fast {times['fast'][-1]:.3f}s | bypassed {times['bypassed'][-1]:.3f}s "
              f"({len(fams)} families each) | ratio {ratios[-1]:.3f}; nulls fast {null_times['fast'][-1]:.3f}s | "
              f"bypassed {null_times['bypassed'][-1]:.3f}s | ratio {null_ratios[-1]:.3f} "
              f"(machine busy {busy.shares[-1]:.0%})", flush=True)

    looks = stopping(args.max_rounds)

    def figures() -> tuple[Figure, Figure]:
        return (ratio_figure("history-speed ratio fast/bypassed", ratios, args.target, looks),
                ratio_figure("history-speed nulls ratio fast/bypassed", null_ratios, args.target, looks))

    until_narrow(round_, lambda: max(figures(), key=lambda f: f.rel_half_width),
                 max_n=args.max_rounds, budget_s=args.budget)
    fig, null_fig = figures()
    print_side_by_side("history-speed", [(s, s, times[s]) for s in SIDES], fig, busy, looks)
    print_side_by_side("history-speed nulls", [(f"nulls {s}", s, null_times[s]) for s in SIDES], null_fig, busy,
                       looks)


if __name__ == "__main__":
    main()

"""Figures of iolab's benchmarks, held to the standard of iolab's own results: every number
with its 95 % CI and its n, repeated until the CI is as narrow as asked (or saying it could
not, with the width reached).

Ratios are averaged on the log scale (the geometric mean of per-pair ratios, with the
t-interval of the mean log ratio transformed back): a ratio and its inverse then get the
same treatment, and one pair at 0.5 does not count less than one at 2.0.

A benchmark that stops as soon as its interval is narrow enough looks at its data after
every step, and a plain 95 % t-interval read at a data-chosen n covers less than 95 %. So a
figure of a run that could stop anywhere from `first` to `last` steps uses iolab's own
calibration (analysis/calibration.py, docs/statistics.md): the per-look tail α' at which
the interval keeps its 95 % over all those looks (`looks=(first, last)`).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from iolab.analysis.calibration import simultaneous_t_alpha
from iolab.analysis.stats import Estimate, mean_ci

MIN_N = 5


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP end a benchmark like Ctrl-C: its `finally` detaches the loop device and
    removes the scratch directories (a plain SIGTERM would skip them and leave both behind)."""
    def _stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)


def cpu_times() -> tuple[int, int, int]:
    """(busy, total, steal) jiffies of the whole machine, from /proc/stat. Steal is time the
    hypervisor gave this VM's CPUs to someone else: it slows whichever side of a pair it hits
    and no load figure inside the VM shows it."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    steal = vals[7] if len(vals) > 7 else 0
    return sum(vals) - idle, sum(vals), steal


class Busy:
    """Share of the machine's CPU time that was busy between start() and stop() (all processes),
    and the share the hypervisor stole."""

    def __init__(self) -> None:
        self.shares: list[float] = []
        self.steal_shares: list[float] = []
        self._t0 = (0, 0, 0)

    def start(self) -> None:
        self._t0 = cpu_times()

    def stop(self) -> float:
        busy, total, steal = (a - b for a, b in zip(cpu_times(), self._t0, strict=False))
        share = busy / total if total > 0 else 0.0
        self.shares.append(share)
        self.steal_shares.append(steal / total if total > 0 else 0.0)
        return share

    def mean(self) -> float:
        return sum(self.shares) / len(self.shares) if self.shares else float("nan")

    def steal_mean(self) -> float:
        return sum(self.steal_shares) / len(self.steal_shares) if self.steal_shares else float("nan")


@dataclass(frozen=True)
class Figure:
    """A benchmark figure: value, 95 % CI, n, and whether the CI reached the asked width."""

    name: str
    value: float
    lo: float
    hi: float
    n: int
    unit: str = ""
    target: float | None = None  # asked relative half-width (0.02 = ±2 %)
    looks: tuple[int, int] | None = None  # the stopping rule's looks the interval covers (None: fixed n)

    @property
    def rel_half_width(self) -> float:
        return (self.hi - self.lo) / 2 / abs(self.value) if self.value else math.inf

    @property
    def reached(self) -> bool:
        return self.target is None or self.rel_half_width <= self.target

    def line(self, label: str = "") -> str:
        """e.g. 'overhead ratio=0.995 [0.985, 1.004] n=12 (I/O path)'."""
        unit = f" {self.unit}" if self.unit else ""
        note = f" ({label})" if label else ""
        return f"{self.name}={_fmt(self.value)} [{_fmt(self.lo)}, {_fmt(self.hi)}]{unit} n={self.n}{note}"

    def verdict(self, why: str = "") -> str:
        """Whether the asked width was reached; `why` (e.g. the machine's load) when not."""
        if self.target is None:
            return ""
        got = f"±{self.rel_half_width:.1%}"
        if self.looks:
            got += f"; simultaneous over looks {self.looks[0]}..{self.looks[1]}"
        if self.reached:
            return f"95% CI within ±{self.target:.0%} ({got})"
        return (f"could not reach ±{self.target:.0%}: the 95% CI is {got} after n={self.n}"
                + (f" ({why})" if why else ""))


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3f}" if abs(x) < 100 else f"{x:.0f}"


def confidence(looks: tuple[int, int] | None) -> float:
    """The per-look confidence that keeps 95 % over the looks first..last (0.95 for a fixed n)."""
    if looks is None or looks[0] >= looks[1]:
        return 0.95
    return 1 - simultaneous_t_alpha(*looks)


def add_round_arguments(ap: argparse.ArgumentParser, *, max_rounds: int, target: float, budget: float,
                        what: str = "the ratio") -> None:
    """--max-rounds, --target and --budget of a benchmark that repeats rounds until its figure's
    95 % CI is narrow enough (`until_narrow`), with that benchmark's defaults."""
    ap.add_argument("--max-rounds", type=int, default=max_rounds,
                    help=f"at most this many rounds (default {max_rounds}; at least {MIN_N})")
    ap.add_argument("--target", type=float, default=target,
                    help=f"relative 95%% CI half-width of {what} to reach ({target:g})")
    ap.add_argument("--budget", type=float, default=budget,
                    help=f"seconds before giving up on the width ({budget:g})")


def stopping(max_n: int, min_n: int = MIN_N) -> tuple[int, int]:
    """The looks of until_narrow(min_n=min_n, max_n=max_n): after every step from min_n to max_n."""
    return (min_n, max(min_n, max_n))


def ratio_figure(name: str, ratios: Sequence[float], target: float | None = None,
                 looks: tuple[int, int] | None = None) -> Figure:
    """Geometric mean of the per-pair ratios with the back-transformed t-interval of their logs."""
    est = mean_ci([math.log(r) for r in ratios if r > 0], confidence(looks))
    return Figure(name, math.exp(est.mean), math.exp(est.lo), math.exp(est.hi), est.n, "", target, looks)


def mean_figure(name: str, values: Sequence[float], unit: str = "", target: float | None = None,
                looks: tuple[int, int] | None = None) -> Figure:
    est: Estimate = mean_ci(values, confidence(looks))
    return Figure(name, est.mean, est.lo, est.hi, est.n, unit, target, looks)


def until_narrow(step: Callable[[int], None], figure: Callable[[], Figure], *, min_n: int = MIN_N,
                 max_n: int, budget_s: float) -> Figure:
    """Call step(i) until figure() reaches its target width, at least min_n and at most max_n
    times, or until budget_s seconds have passed; returns the last figure."""
    t0 = time.monotonic()
    for i in range(max_n):
        step(i)
        if i + 1 >= min_n:
            f = figure()
            if f.reached or time.monotonic() - t0 > budget_s:
                return f
    return figure()


def print_side_by_side(bench: str, sides: Sequence[tuple[str, str, Sequence[float]]], ratio: Figure,
                       busy: Busy, looks: tuple[int, int] | None) -> None:
    """The closing lines of a benchmark that timed two ways of doing one thing in alternating rounds
    (`sides`: (label, figure name, seconds) each): each side's median and range, whether the ratio
    reached its width (else the machine's load, which is why not), one figure line per side and
    the ratio's line last, so a note quotes the ratio and both absolute figures from one run."""
    why = (f"the machine's CPUs were {busy.mean():.0%} busy on average, load {os.getloadavg()[0]:.1f} on "
           f"{os.cpu_count()} CPUs")
    for label, _, v in sides:
        print(f"{label}: median {statistics.median(v):.2f} s, min {min(v):.2f} s, max {max(v):.2f} s")
    print(ratio.verdict(why))
    for _, name, v in sides:
        print(mean_figure(f"{bench} {name} seconds", v, "s", None, looks).line())
    print(ratio.line())

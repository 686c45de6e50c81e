"""Clock skew of fleet hosts (host clock minus this machine's): what is known, and when a trial
cannot trust it. Pure functions; the probes that measure it are in fleet/checks.py.

* A host on this machine's own clock (a unix socket, loopback, or `same_machine = true`) has
  skew 0, exactly: nothing is measured.
* Any other host: each probe is a short fio job logging with the host's clock
  (`log_unix_epoch`); its last sample was taken before its log file was written here, so
  `sample time - the file's mtime` is a *lower bound* of the skew, low by the delay from the
  sample to the file (fio's end of job and the network, ~20 ms on this machine). The
  estimate is the highest bound of several probes: the one that travelled fastest (the
  minimum-delay estimate, as NTP keeps its best sample). Its spread is how much the probes'
  delays varied.
* Through a long study it is measured again (REMEASURE_S), and every trial's own logs give
  one more lower bound: a bound above the estimate proves the estimate stale (the clocks
  drifted); the trial is then aligned with the bound and flagged if the difference exceeds
  the window's tolerance, and the host is probed again before the next trial.

A trial is flagged `fleet_skew_unknown` when a host's skew could not be measured, and
`fleet_skew_exceeds_tolerance` when what is known about a host's skew is uncertain by more
than the tolerance within which a sample counts as inside the common window.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

PROBES = 5               # probes per measurement of a host on another clock
REMEASURE_S = 300.0      # a measurement older than this is repeated before the next trial
TOLERANCE_FRACTION = 0.25  # of the log interval: aggregate._window_mean's inclusion tolerance
SAME_CLOCK = "same clock as this machine"


@dataclass(frozen=True)
class Skew:
    ms: float | None                  # host clock minus this machine's; None: unknown
    method: str
    spread_ms: float | None = None    # max - min of the probes' bounds
    bounds: tuple[float, ...] = ()
    measured_at: float = field(default_factory=time.time)

    @property
    def exact(self) -> bool:
        return self.method == SAME_CLOCK

    def stale(self, every_s: float = REMEASURE_S, now: float | None = None) -> bool:
        """Due for measuring again: on another clock, and older than `every_s` or unknown."""
        return not self.exact and ((now or time.time()) - self.measured_at > every_s or self.ms is None)

    def manifest(self) -> dict[str, object]:
        return {"clock_skew_ms": self.ms, "clock_skew_method": self.method, "clock_skew_spread_ms": self.spread_ms,
                "clock_skew_probes_ms": [round(b, 1) for b in self.bounds],
                "clock_skew_measured_at": round(self.measured_at, 3)}


def same_clock() -> Skew:
    return Skew(0.0, SAME_CLOCK, 0.0)


def from_bounds(bounds: Sequence[float | None]) -> Skew:
    """The minimum-delay estimate of a host's skew from its probes' lower bounds."""
    known = [b for b in bounds if b is not None]
    if not known:
        return Skew(None, f"unknown: none of {len(bounds)} probes logged a sample")
    return Skew(max(known), f"minimum-delay estimate of {len(known)} probes (a lower bound: low by the fastest "
                            "probe's delivery time)", max(known) - min(known), tuple(known))


def tolerance_ms(interval_ms: float) -> float:
    return TOLERANCE_FRACTION * interval_ms


@dataclass(frozen=True)
class TrialSkew:
    """What a trial used for each host, and what it learnt."""

    used: dict[str, float]            # host -> skew the trial's samples were placed with
    flags: list[str]
    remeasure: list[str]              # hosts to probe again before the next trial


def for_trial(skews: Mapping[str, Skew], bounds: Mapping[str, float | None], interval_ms: float) -> TrialSkew:
    """The skews a trial places its hosts' samples with, and its flags.

    skews: each host's latest measurement; bounds: the lower bound of each host's skew from the
    trial's own logs (None without logs)."""
    tol = tolerance_ms(interval_ms)
    used: dict[str, float] = {}
    unknown, uncertain, remeasure = [], [], []
    for name, s in skews.items():
        bound = bounds.get(name)
        if s.exact:
            used[name] = 0.0
            continue
        if s.ms is None:
            if bound is None:
                unknown.append(name)
                used[name] = 0.0
            else:
                used[name] = bound
                uncertain.append(f"{name} (only this trial's own bound, {bound:+.0f} ms)")
            remeasure.append(name)
            continue
        used[name] = s.ms
        error = s.spread_ms or 0.0
        if bound is not None and bound > s.ms:
            used[name] = bound  # a lower bound above the estimate: the estimate is stale
            error = max(error, bound - s.ms)
            if bound - s.ms > tol:
                remeasure.append(name)
        if error > tol:
            uncertain.append(f"{name} ±{error:.0f} ms")
    flags = []
    if unknown:
        flags.append(f"fleet_skew_unknown: the clock skew of {', '.join(sorted(unknown))} is unknown (no probe or "
                     "log of this trial carried a sample); their samples are placed as if their clocks were this "
                     "machine's")
    if uncertain:
        flags.append(f"fleet_skew_exceeds_tolerance: clock skew known only to {', '.join(sorted(uncertain))}, "
                     f"more than the common window's tolerance of {tol:g} ms (a quarter of the "
                     f"{interval_ms:.0f} ms log interval): samples near the window's edges may be misplaced")
    return TrialSkew(used, flags, sorted(set(remeasure)))

"""Per-group counters sampled through a run: the time series behind steady-state
detection and per-group share over time.

A thread reads every group's counters on a fixed schedule (t0 + k*interval, so sampling
does not drift when a read is slow) and keeps cumulative values; rates and shares are
derived afterwards from differences, so a late sample changes no total.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from iolab.cgroups.counters import IoCounters

Reader = Callable[[], dict[str, IoCounters]]


@dataclass
class Series:
    """Cumulative counters per group at monotonic times `t` (seconds since start)."""

    t: list[float] = field(default_factory=list)
    counters: list[dict[str, IoCounters]] = field(default_factory=list)

    def groups(self) -> list[str]:
        return list(self.counters[0]) if self.counters else []

    def delta(self, i: int = 0, j: int = -1) -> dict[str, IoCounters]:
        """Counters done between sample i and sample j."""
        a, b = self.counters[i], self.counters[j]
        return {g: b[g] - a[g] for g in b}

    def iops(self) -> list[tuple[float, dict[str, float]]]:
        """Per-interval IOPS per group, stamped at each interval's midpoint."""
        out = []
        for k in range(1, len(self.t)):
            dt = self.t[k] - self.t[k - 1]
            d = self.delta(k - 1, k)
            out.append(((self.t[k] + self.t[k - 1]) / 2, {g: c.ios / dt for g, c in d.items()}))
        return out

    def shares(self) -> list[tuple[float, dict[str, float]]]:
        """Per-interval share of completed I/Os per group (0..1; empty interval -> zeros)."""
        out = []
        for t, rates in self.iops():
            total = sum(rates.values())
            out.append((t, {g: (r / total if total else 0.0) for g, r in rates.items()}))
        return out

    def window_ratio(self, i: int, j: int, ref: str) -> dict[str, float]:
        """I/Os per group between samples i and j, divided by group `ref`'s."""
        d = self.delta(i, j)
        base = d[ref].ios
        return {g: (c.ios / base if base else float("nan")) for g, c in d.items()}

    def to_dict(self) -> dict:
        return {"t": self.t, "counters": [{g: c.as_dict() for g, c in s.items()}
                                          for s in self.counters]}


class Sampler:
    """start() before the load, stop() after; stop() takes a last sample and returns the series."""

    def __init__(self, read: Reader, interval_s: float = 0.5):
        self.read = read
        self.interval_s = interval_s
        self.series = Series()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self.error: BaseException | None = None

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="cgroup-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> Series:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            if self.error is None:
                self._sample()
        if self.error is not None:
            raise RuntimeError(f"cgroup sampler failed: {self.error}") from self.error
        return self.series

    def _loop(self) -> None:
        k = 1
        while not self._stop.wait(max(0.0, self._t0 + k * self.interval_s - time.monotonic())):
            try:
                self._sample()
            except BaseException as exc:  # surfaced by stop(); a thread must not die silently
                self.error = exc
                return
            k += 1

    def _sample(self) -> None:
        t = time.monotonic() - self._t0
        self.series.counters.append(self.read())
        self.series.t.append(t)

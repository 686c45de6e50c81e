"""Verdicts decided by where an interval lies, never by whether it merely touches a band.

Every verdict iolab prints (the reproduce page's claims, a study's summary, the write-modes
cross-check, sync-amplification's cost table) is one of:

* ``holds``: the interval lies wholly inside the claim's band, or wholly beyond its
  threshold. For a claim of equality ("the same within ±5 %") that is the equivalence test
  (TOST: both one-sided tests reject at the interval's level);
* ``differs``: the interval lies wholly outside the band;
* ``undecided``: it straddles an edge: the data cannot tell yet. It says how many more
  repetitions would likely decide it, from the spread measured so far (`Decision.more`), or
  that no number of them will (an estimate sitting on the edge);
* ``not testable here``: the run cannot answer it on this machine (decided by the caller:
  under TCG, a matrix the quick run leaves out).

A claim read from several intervals (write and read, every weight class) holds when all of
them hold, differs when any differs, and is undecided otherwise.

Pure: a verdict is a function of intervals, which are functions of stored trials, so a
runner can recompute every verdict between rounds (the `--budget` mode spends repetitions
where `Decision.more` says they decide something). `ReportedVerdict` is that interface: one
verdict a study (or a reproduction's page) reports, with the configurations (by id) that
would decide it (analysis/budget.py and runner/schedule.py read nothing else).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from iolab.core.model import config_id_of_trial  # not analysis.trials: its models need this module

HOLDS, DIFFERS, UNDECIDED, UNTESTABLE = "holds", "differs", "undecided", "not testable here"
VERDICTS = (HOLDS, DIFFERS, UNDECIDED, UNTESTABLE)
PROJECT_MAX = 30  # how far ahead `more` looks (a study's max_repetitions is rarely above)


@dataclass(frozen=True)
class Band:
    """The values a claim allows: [lo, hi] (either end infinite for a one-sided threshold)."""

    lo: float = -math.inf
    hi: float = math.inf

    def decide(self, lo: float | None, hi: float | None) -> str:
        """holds / differs / undecided for an interval [lo, hi] (None or NaN: no interval: undecided)."""
        if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
            return UNDECIDED
        if self.lo <= lo and hi <= self.hi:
            return HOLDS
        if hi < self.lo or lo > self.hi:
            return DIFFERS
        return UNDECIDED

    def words(self, digits: int = 2) -> str:
        if math.isinf(self.lo) and math.isinf(self.hi):
            return "anything"
        if math.isinf(self.hi):
            return f"at least {self.lo:.{digits}f}"
        if math.isinf(self.lo):
            return f"below {self.hi:.{digits}f}"
        return f"within {self.lo:.{digits}f}–{self.hi:.{digits}f}"

    def edge_near(self, x: float) -> float:
        """The band edge closest to x (the one more repetitions would have to clear)."""
        edges = [e for e in (self.lo, self.hi) if math.isfinite(e)]
        return min(edges, key=lambda e: abs(e - x)) if edges else math.nan


def combine(verdicts: Iterable[str]) -> str:
    """All hold: holds; any differs: differs; else undecided (no verdicts: undecided)."""
    vs = list(verdicts)
    if vs and all(v == HOLDS for v in vs):
        return HOLDS
    if any(v == DIFFERS for v in vs):
        return DIFFERS
    return UNDECIDED


@dataclass(frozen=True)
class Decision:
    """What would decide an undecided verdict: `more` further repetitions of each configuration
    it reads (None: none within PROJECT_MAX: the estimate is too close to an edge for the spread)."""

    more: int | None
    configurations: tuple[str, ...] = ()
    config_ids: tuple[str, ...] = ()  # the same configurations by id (trials[].id's prefix): where to spend

    def words(self) -> str:
        if self.more is None:
            return (f"more repetitions are unlikely to decide it within {PROJECT_MAX}: the estimate is too close to "
                    "the band's edge for the spread measured")
        where = f" of {', '.join(self.configurations)}" if self.configurations else " of each configuration it reads"
        return f"about {self.more} more repetition(s){where} would likely decide it, if the spread stays as measured"

    def as_dict(self) -> dict[str, object]:
        return {"more_repetitions": self.more, "configurations": list(self.configurations),
                "config_ids": list(self.config_ids)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> Decision | None:
        """The inverse of as_dict (a finding stored as a dict); None for None."""
        if not d:
            return None
        more = d.get("more_repetitions")
        return cls(more if isinstance(more, int) else None, tuple(d.get("configurations") or ()),
                   tuple(d.get("config_ids") or ()))


@dataclass(frozen=True)
class ReportedVerdict:
    """One verdict a study or a page reports, as a repetition budget reads it between rounds:
    `id` stable across rounds (a claim's id, a table row's key), `text` what it asks in words,
    the verdict, and for an undecided one what would decide it (`decision.config_ids`)."""

    id: str
    text: str
    verdict: str
    decision: Decision | None = None

    @property
    def decidable(self) -> bool:
        """Undecided, and more repetitions of known configurations would likely decide it."""
        d = self.decision
        return self.verdict == UNDECIDED and d is not None and d.more is not None and bool(d.config_ids)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "verdict": self.verdict,
                "decide": self.decision.as_dict() if self.decision else None}


def config_ids_of(trials: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """The configuration ids of these trials (a trial id is '<config id>-r<repetition>'), in order."""
    return tuple(dict.fromkeys(config_id_of_trial(t["id"]) for t in trials))


def repetitions_to_decide(current: int, decided_with: Callable[[int], bool]) -> int | None:
    """The fewest further repetitions k after which `decided_with(k)` (the verdict recomputed from
    intervals projected k repetitions ahead, at the spread measured so far) is no longer undecided;
    None if none does before PROJECT_MAX repetitions in all. `current`: repetitions so far.
    The one projection loop every "what would decide it" (claims, studies' tables) goes through."""
    return next((k for k in range(1, max(PROJECT_MAX - current, 0) + 1) if decided_with(k)), None)


def more_needed(band: Band, project: Callable[[int], tuple[float, float]], current: int,
                configurations: Iterable[str] = (), config_ids: Iterable[str] = ()) -> Decision:
    """What would decide one interval against `band`: the fewest further repetitions after which the
    projected interval (`project(k)`: the interval with k more repetitions at the spread measured
    so far, same estimate) is decided (see `repetitions_to_decide`)."""
    more = repetitions_to_decide(current, lambda k: band.decide(*project(k)) != UNDECIDED)
    return Decision(more, tuple(configurations), tuple(config_ids))


Interval = tuple[float, float]


def decide_all(items: Sequence[tuple[Band, Interval, Callable[[int], Interval]]], current: int,
               configurations: Iterable[str] = (), config_ids: Iterable[str] = ()) -> tuple[str, Decision | None]:
    """The verdict over several intervals (`combine`), and for an undecided one what would decide it:
    the fewest further repetitions after which the projected intervals (`project(k)`) give a verdict.
    items: (band, (lo, hi) now, project) per interval; `current`: repetitions so far."""
    verdict = combine(band.decide(*now) for band, now, _ in items)
    if verdict != UNDECIDED or not items:
        return verdict, None
    more = repetitions_to_decide(
        current, lambda k: combine(band.decide(*project(k)) for band, _, project in items) != UNDECIDED)
    return verdict, Decision(more, tuple(configurations), tuple(config_ids))

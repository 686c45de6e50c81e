"""What a metric is: its unit, which way is better, and how it aggregates over repetitions.

Every workload, probe and the runner declare every metric they can produce (a `Metric`
each), once. Analysis, `iolab compare`, charts, `study.metric` validation and the results
contract read these declarations; nothing guesses from a metric's name.

Aggregation over repetitions (docs/statistics.md):

* ``mean``: the arithmetic mean. Right for latencies, times, counts, ratios, and for rates
  measured over a *fixed time* (fio's time_based jobs, sysbench --time, iperf3 -t): with
  equal durations, the mean of the rates is total work / total time.
* ``harmonic``: the harmonic mean. Right for rates over a *fixed amount of work* (iozone,
  the write-mode helper, a fio job that runs through its size once): the harmonic mean of
  the rates is total work / total time, the arithmetic mean would overweight fast trials.

Range (``domain``): the values a metric can take, which its intervals never leave
(docs/statistics.md, "Domains"). Declared with the metric, or implied by its unit (UNIT_DOMAINS:
a rate, a time, a percentage can be 0 but never negative; a fraction lies in [0, 1]; an event
count is a non-negative integer); a unit that implies none (``log2``, a change of bytes) must be
declared. What an interval estimates follows from the range: the **median** of the
configuration's repetitions for every measured quantity, the **mean** for event counts (a
count that is 0 in four trials and 383 in the fifth has a median of 0; its mean says errors
happen).

A name may be a pattern with explicit placeholders, for per-group or per-side families:
``{side:read|write}_iops`` (one of the listed words), ``ratio_{weight:int}`` (digits),
``{name:word}_iops_kernel`` (lower-case letters, digits, underscores), ``{x:label}``
(word characters and dots, e.g. a prime limit ``1e8`` or ``25e5``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from iolab.core import registry

Direction = Literal["higher", "lower", "neither"]
Aggregate = Literal["mean", "harmonic"]
DIRECTIONS: tuple[str, ...] = ("higher", "lower", "neither")
AGGREGATES: tuple[str, ...] = ("mean", "harmonic")

Estimand = Literal["median", "mean"]


@dataclass(frozen=True)
class Domain:
    """The values a metric can take: [lo, hi] (integers only when `integer`)."""

    name: str
    lo: float
    hi: float
    integer: bool = False

    def clip(self, x: float) -> float:
        return min(max(x, self.lo), self.hi)

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi

    @property
    def estimand(self) -> Estimand:
        """The mean for event counts (rare events matter), the median for everything else."""
        return "mean" if self.integer else "median"


REAL = Domain("real", -math.inf, math.inf)
NONNEG = Domain("nonneg", 0.0, math.inf)  # rates (a stalled trial is 0), times, sizes, percentages, ratios
UNIT = Domain("unit", 0.0, 1.0)  # fractions, shares, indices in [0, 1]
COUNT = Domain("count", 0.0, math.inf, integer=True)  # events, requests, calls, bytes
DOMAINS: dict[str, Domain] = {d.name: d for d in (REAL, NONNEG, UNIT, COUNT)}

# What a unit says about the range; a unit not here needs a domain in its declaration.
UNIT_DOMAINS: dict[str, Domain] = {
    **{u: NONNEG for u in ("IOPS", "MiB/s", "MB/s", "KiB/s", "Mbit/s", "ops/s", "events/s", "calls/s",
                           "durable writes/s", "s", "ms", "µs", "ns", "%", "cores", "ratio", "x")},
    **{u: UNIT for u in ("fraction", "index")},
    **{u: COUNT for u in ("bytes", "sectors", "requests", "calls", "I/Os", "ops", "operations", "events",
                          "segments", "syncs", "writes", "transactions", "iterations", "groups", "threads",
                          "CPUs", "hosts")},
}

_PLACEHOLDER = re.compile(r"\{([a-z_]+):([^{}]+)\}")
_KINDS = {"int": r"[0-9]+", "word": r"[a-z0-9_]+", "label": r"[A-Za-z0-9_.]+"}


@dataclass(frozen=True)
class Metric:
    """One declared metric (or a declared family, when `name` has placeholders)."""

    name: str
    unit: str
    direction: Direction
    description: str
    aggregate: Aggregate = "mean"
    domain: Domain | None = None  # None: the unit's (UNIT_DOMAINS)
    _regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric {self.name}: direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"metric {self.name}: aggregate must be one of {AGGREGATES}, got {self.aggregate!r}")
        if not self.description:
            raise ValueError(f"metric {self.name}: a one-line description is required")
        if self.domain is None:
            if self.unit not in UNIT_DOMAINS:
                raise ValueError(f"metric {self.name}: unit {self.unit!r} implies no range; declare its domain "
                                 f"({', '.join(DOMAINS)})")
            object.__setattr__(self, "domain", UNIT_DOMAINS[self.unit])
        if "{" in self.name:
            object.__setattr__(self, "_regex", re.compile(_pattern_regex(self.name)))

    @property
    def is_pattern(self) -> bool:
        return self._regex is not None

    def matches(self, name: str) -> bool:
        if self._regex is None:
            return name == self.name
        return self._regex.fullmatch(name) is not None

    @property
    def range(self) -> Domain:
        assert self.domain is not None  # set in __post_init__
        return self.domain

    @property
    def estimand(self) -> Estimand:
        return self.range.estimand

    @property
    def higher_is_better(self) -> bool | None:
        return {"higher": True, "lower": False}.get(self.direction)

    def axis_label(self, shown_name: str | None = None) -> str:
        """A chart axis: 'iops (IOPS, higher is better)'."""
        parts = [self.unit] if self.unit else []
        if self.direction != "neither":
            parts.append(f"{self.direction} is better")
        label = shown_name or self.name
        return f"{label} ({', '.join(parts)})" if parts else label

    def as_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "direction": self.direction, "aggregate": self.aggregate,
                "domain": self.range.name, "estimand": self.estimand, "description": self.description}

    @classmethod
    def from_dict(cls, name: str, d: Any) -> Metric:
        """The declaration `as_dict` stored for the concrete metric `name`; ValueError if it is not one."""
        if not isinstance(d, dict) or d.get("domain") not in DOMAINS:
            raise ValueError(f"metric {name}: not a stored declaration: {d!r}")
        direction, aggregate = d.get("direction"), d.get("aggregate", "mean")
        if direction not in DIRECTIONS or aggregate not in AGGREGATES:
            raise ValueError(f"metric {name}: not a stored declaration: {d!r}")
        return cls(name, str(d.get("unit", "")), direction, str(d.get("description") or ""), aggregate,
                   DOMAINS[d["domain"]])


def _pattern_regex(name: str) -> str:
    out, pos = [], 0
    for m in _PLACEHOLDER.finditer(name):
        out.append(re.escape(name[pos:m.start()]))
        kind = m.group(2)
        if kind in _KINDS:
            out.append(f"(?:{_KINDS[kind]})")
        elif re.fullmatch(r"[A-Za-z0-9_.]+(\|[A-Za-z0-9_.]+)*", kind):
            out.append("(?:" + "|".join(re.escape(w) for w in kind.split("|")) + ")")
        else:
            raise ValueError(f"metric pattern {name!r}: unknown placeholder kind {kind!r}")
        pos = m.end()
    rest = name[pos:]
    if "{" in rest or "}" in rest:
        raise ValueError(f"metric pattern {name!r}: malformed placeholder")
    out.append(re.escape(rest))
    return "".join(out)


class MetricSet:
    """The declarations of one producer (or several merged). Exact names win over patterns."""

    def __init__(self, metrics: Iterable[Metric]):
        self._exact: dict[str, Metric] = {}
        self._patterns: list[Metric] = []
        pattern_names: set[str] = set()
        for m in metrics:
            if m.is_pattern:
                if m.name in pattern_names:
                    raise ValueError(f"metric pattern {m.name} declared twice")
                pattern_names.add(m.name)
                self._patterns.append(m)
            else:
                if m.name in self._exact:
                    raise ValueError(f"metric {m.name} declared twice")
                self._exact[m.name] = m

    def get(self, name: str) -> Metric | None:
        if name in self._exact:
            return self._exact[name]
        return next((p for p in self._patterns if p.matches(name)), None)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[Metric]:
        yield from self._exact.values()
        yield from self._patterns

    def __len__(self) -> int:
        return len(self._exact) + len(self._patterns)

    def undeclared(self, names: Iterable[str]) -> list[str]:
        return sorted({n for n in names if n not in self})

    def merged(self, fallback: Iterable[Metric]) -> MetricSet:
        """This set plus every declaration of `fallback` whose name it does not declare itself."""
        own = list(self)
        names = {m.name for m in own}
        return MetricSet(own + [m for m in fallback if m.name not in names and self.get(m.name) is None])

    def with_aggregate(self, names: Iterable[str], aggregate: Aggregate) -> MetricSet:
        wanted = set(names)
        return MetricSet(replace(m, aggregate=aggregate) if m.name in wanted else m for m in self)

    def describe(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """{name: declaration} for the given concrete names (undeclared ones are left out)."""
        out = {}
        for n in names:
            m = self.get(n)
            if m is not None:
                out[n] = m.as_dict()
        return out


# The runner's own metric, added to every trial whose executor measured the generator's CPU.
RUNNER_METRICS: tuple[Metric, ...] = (
    Metric("generator_cpu_busy", "cores", "neither",
           "CPU time of the load generator's processes per second of wall time (1.0 = one core busy)"),
)


def for_workload(workload: dict[str, Any]) -> MetricSet:
    """The declarations that apply to a trial of this workload configuration (its `_workload`),
    from today's workload class: what the runner stores with each trial (`TrialDeclarations`), and
    how a trial stored before that is read."""
    kind = workload.get("kind")
    if not isinstance(kind, str) or kind not in registry.WORKLOADS:
        return MetricSet(RUNNER_METRICS)
    return registry.workload_class(kind).metric_set(workload)


@dataclass(frozen=True)
class TrialDeclarations:
    """What a trial's values mean, stored with them (`trials[].manifest.declarations`), like
    PerfKitBenchmarker's Sample(metric, value, unit, metadata): the declaration of every metric
    and probe value the trial holds, its main metric, and which probe keys are not measurements.
    So a stored run is read with the meaning it was measured with, by code that imports no
    workload or probe (an old run's meaning no longer depends on today's classes). The value's
    resolution stays where the workload records it per trial (`manifest.resolution`).

    A name the trial holds without a declaration here had none when it ran: it is undeclared."""

    main_metric: str | None
    metrics: dict[str, Metric]
    probes: dict[str, dict[str, Metric]] = field(default_factory=dict)
    probe_attributes: dict[str, tuple[str, ...]] = field(default_factory=dict)

    KEY = "declarations"  # the manifest key

    @classmethod
    def record(cls, main_metric: str | None, declared: MetricSet, names: Iterable[str],
               probes: Mapping[str, tuple[MetricSet, tuple[str, ...], Iterable[str]]] | None = None
               ) -> TrialDeclarations:
        """The declarations of the concrete `names` a trial produced (and of its main metric, which
        a failed trial needs too); `probes`: {probe: (its declarations, its attribute keys, the
        numeric keys of its result)}."""
        wanted = [*names, *([main_metric] if main_metric else [])]
        found = {n: m for n in dict.fromkeys(wanted) if (m := declared.get(n)) is not None}
        pdecl: dict[str, dict[str, Metric]] = {}
        pattrs: dict[str, tuple[str, ...]] = {}
        for probe, (ms, attributes, keys) in (probes or {}).items():
            pdecl[probe] = {k: m for k in keys if (m := ms.get(k)) is not None}
            pattrs[probe] = tuple(attributes)
        return cls(main_metric, {n: replace(m, name=n) for n, m in found.items()},
                   {p: {k: replace(m, name=k) for k, m in d.items()} for p, d in pdecl.items()}, pattrs)

    def to_manifest(self) -> dict[str, Any]:
        return {"main_metric": self.main_metric, "metrics": {n: m.as_dict() for n, m in self.metrics.items()},
                "probes": {p: {k: m.as_dict() for k, m in d.items()} for p, d in self.probes.items()},
                "probe_attributes": {p: list(a) for p, a in self.probe_attributes.items()}}

    @classmethod
    def from_manifest(cls, manifest: Any) -> TrialDeclarations | None:
        """The stored declarations of a trial's manifest; None for a trial stored before they were
        (or a record that is not one: then the trial is read as an old one)."""
        d = manifest.get(cls.KEY) if isinstance(manifest, dict) else None
        if not isinstance(d, dict) or not isinstance(d.get("metrics"), dict):
            return None
        try:
            main = d.get("main_metric")
            return cls(main if isinstance(main, str) else None,
                       {n: Metric.from_dict(n, m) for n, m in d["metrics"].items()},
                       {p: {k: Metric.from_dict(k, m) for k, m in ms.items()}
                        for p, ms in (d.get("probes") or {}).items()},
                       {p: tuple(str(a) for a in attrs) for p, attrs in (d.get("probe_attributes") or {}).items()})
        except (ValueError, TypeError, AttributeError):
            return None

    def metric_set(self) -> MetricSet:
        return MetricSet(self.metrics.values())


def numeric_keys(result: Any, prefix: str = "") -> list[str]:
    """Names of the numbers in a probe's result: top-level keys, and 'key.entry' one level down."""
    out: list[str] = []
    if not isinstance(result, dict):
        return out
    for k, v in result.items():
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, (int, float)):
            out.append(f"{prefix}{k}")
        elif isinstance(v, dict) and not prefix:
            out += numeric_keys(v, f"{k}.")
    return out

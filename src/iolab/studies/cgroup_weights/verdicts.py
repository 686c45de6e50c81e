"""cgroup-weights' verdicts, as a repetition budget reads them: per controller and number of
groups, whether every weight class's ratio lies within ±15 % of its weight (the findings'
`by_groups[N].verdict`), with how many more repetitions of that sweep would likely decide an
undecided one. Pure, on the results document, with the intervals the findings use."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from iolab.analysis.sequential import RunEstimator
from iolab.analysis.trials import Doc, Trial, metric_set_of
from iolab.analysis.verdicts import Band, ReportedVerdict, config_ids_of, decide_all
from iolab.studies.cgroup_weights.analysis import (
    CLASSES,
    RATIO_TOL,
    controller_of,
    domain_of,
    groups_n,
    sweep_trials,
)
from iolab.studies.common import ok_trials


def study_verdicts(doc: Doc) -> list[ReportedVerdict]:
    est = RunEstimator(doc)  # as analyze: the run's looks, each verdict read on its own
    by: dict[tuple[str, int], list[Trial]] = defaultdict(list)
    for t in sweep_trials(ok_trials(doc)):
        by[(controller_of(t), groups_n(t))].append(t)
    out = []
    for (ctrl, n), ts in sorted(by.items()):
        items = []
        for c in CLASSES[1:]:
            metric = f"ratio_{c}"
            values = [float(t["metrics"][metric]) for t in ts if isinstance(t["metrics"].get(metric), (int, float))]
            if not values:
                continue
            domain = domain_of(metric_set_of(ts), metric)  # the range the trials stored
            e = est.mean(values, domain=domain)
            band = Band(int(c) / 100 * (1 - RATIO_TOL), int(c) / 100 * (1 + RATIO_TOL))
            items.append((band, (e.lo, e.hi), _projection(est, values, domain)))
        if not items:
            continue
        verdict, decision = decide_all(items, len(ts), (f"{ctrl} N={n}",), config_ids_of(ts))
        out.append(ReportedVerdict(f"{ctrl} N={n}", f"under {ctrl} with {n} groups every class ratio lies within "
                                                    f"±{RATIO_TOL:.0%} of its weight", verdict, decision))
    return out


def _projection(est: RunEstimator, values: list[float], domain: Any) -> Any:
    def project(k: int) -> tuple[float, float]:
        p = est.projected(values, k, domain)
        return p.lo, p.hi
    return project

"""Reading the results document: trials by configuration, their labels, the run's settings, and
what their values mean (the declarations each trial stored; a trial stored before trials carried
them is read with today's workload and probe registries)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from iolab.analysis.record import Record
from iolab.core import metrics, registry
from iolab.core.metrics import MetricSet, TrialDeclarations, numeric_keys
from iolab.core.model import config_id_of_trial
from iolab.probes import registry as probe_registry
from iolab.spec.study import StudySettings

# The results document (docs/results.md) and one of its trials, as parsed JSON: the contract's shape.
Doc = dict[str, Any]
Trial = dict[str, Any]
# A trial's configuration (its `_target` or `_workload`) or its labels, as its params hold them: the
# validated spec's values.
Params = dict[str, Any]


def labels_of(trial: Trial) -> Params:
    return {k: v for k, v in trial["params"].items() if not k.startswith("_")}


def label_text(trial: Trial, fallback: str = "") -> str:
    return ", ".join(f"{k}={v}" for k, v in labels_of(trial).items()) or fallback


def config_of(trial: Trial) -> str:
    """The configuration id: a trial id is '<config id>-r<repetition>'."""
    return config_id_of_trial(trial["id"])


def by_config(doc: Doc) -> dict[str, list[Trial]]:
    """{config id: its trials in stored (= execution) order}."""
    groups: dict[str, list[Trial]] = defaultdict(list)
    for t in doc["trials"]:
        groups[config_of(t)].append(t)
    return groups


def relative_resolution(trials: list[Trial], metric: str) -> float:
    """The largest clock error bound of `metric` among the trials, relative to its value
    (`manifest.resolution`, written by the workload; 0 when none recorded: the value is exact
    as far as its tool knows). What stats.with_resolution widens an interval by."""
    worst = 0.0
    for t in trials:
        step = ((t.get("manifest") or {}).get("resolution") or {}).get(metric)
        value = (t.get("metrics") or {}).get(metric)
        if isinstance(step, (int, float)) and isinstance(value, (int, float)) and value and step > 0:
            worst = max(worst, abs(step / value))
    return worst


def workload_of(trial: Trial) -> Params:
    w = (trial.get("params") or {}).get("_workload")
    return w if isinstance(w, dict) else {}


def settings_of(doc: Doc) -> StudySettings | None:
    """The run's [study] settings, or None when the stored spec does not validate any more."""
    table = (doc.get("spec") or {}).get("study")
    try:
        return StudySettings(**table) if isinstance(table, dict) else None
    except (ValidationError, TypeError):
        return None


def stored_declarations(trial: Trial) -> TrialDeclarations | None:
    """What the trial's values meant when it ran, as the runner stored them with it; None for a
    trial stored before trials carried their declarations."""
    return TrialDeclarations.from_manifest(trial.get("manifest"))


def metric_set_of(trials: Sequence[Trial]) -> MetricSet:
    """The declarations of these trials' metrics (one configuration's): the ones each trial stored,
    and for a trial stored before that, today's declarations of its workload (the registry)."""
    own: dict[str, metrics.Metric] = {}
    legacy: Trial | None = None
    for t in trials:
        d = stored_declarations(t)
        if d is None:
            legacy = t if legacy is None else legacy
            continue
        for name, m in d.metrics.items():
            own.setdefault(name, m)
    out = MetricSet(own.values())
    if legacy is not None:  # the trials of one configuration share one workload: its first is asked
        out = out.merged(metrics.for_workload(workload_of(legacy)))
    return out


def main_metric_of(trials: Sequence[Trial], settings: StudySettings | None) -> str | None:
    """The metric adaptive stopping watched for these trials (one configuration's): the study's,
    else the one their declarations stored, else (a run from before) the workload's today."""
    if settings is not None and settings.metric:
        return settings.metric
    for t in trials:
        d = stored_declarations(t)
        if d is not None:
            return d.main_metric
    return _registry_main_metric(workload_of(trials[0])) if trials else None


def _registry_main_metric(workload: Params) -> str | None:
    kind = workload.get("kind")
    if not isinstance(kind, str) or kind not in registry.WORKLOADS:
        return None
    cls = registry.workload_class(kind)
    try:  # some workloads pick their main metric from their parameters (pure: no I/O in __init__)
        return str(cls(cls.Params(**workload)).main_metric)
    except (ValidationError, TypeError, ValueError):
        return getattr(cls, "main_metric", None)


class Declaration(Record):
    """One metric's declaration as the findings list it (core/metrics.py Metric.as_dict)."""

    unit: str
    direction: str
    aggregate: str
    domain: str
    estimand: str
    description: str

    @classmethod
    def of_metric(cls, m: metrics.Metric) -> Declaration:
        return cls(**m.as_dict())


class MetricDeclarations(Record):
    """findings.metric_declarations: the declaration of every metric and probe value the trials
    carry (nested probe values named 'key.entry'), and the names that have none."""

    workloads: dict[str, dict[str, Declaration]]
    probes: dict[str, dict[str, Declaration]]
    undeclared: list[str]


def _probe_declarations(trial: Trial, stored: TrialDeclarations | None, probe: str
                        ) -> tuple[MetricSet, set[str]]:
    if stored is not None:
        return MetricSet(stored.probes.get(probe, {}).values()), set(stored.probe_attributes.get(probe, ()))
    return probe_registry.metric_set(probe), set(probe_registry.attributes(probe))


def declarations(doc: Doc) -> MetricDeclarations:
    """The declaration (unit, direction, aggregate, description) of every metric the trials carry,
    as each trial stored it (a trial stored before that: today's workload and probe registries)."""
    workloads: dict[str, dict[str, Declaration]] = {}
    probes: dict[str, dict[str, Declaration]] = {}
    undeclared: set[str] = set()
    for t in doc["trials"]:
        w = workload_of(t)
        kind = str(w.get("kind", "?"))
        stored = stored_declarations(t)
        ms = metric_set_of([t])
        for name in t.get("metrics") or {}:
            decl = ms.get(name)
            if decl is None:
                undeclared.add(f"{kind}:{name}")
            else:
                workloads.setdefault(kind, {})[name] = Declaration.of_metric(decl)
        for probe, result in (t.get("probes") or {}).items():
            ps, skip = _probe_declarations(t, stored, probe)
            for name in (n for n in numeric_keys(result) if n.split(".", 1)[0] not in skip):
                pdecl = ps.get(name)
                if pdecl is None:
                    undeclared.add(f"probe {probe}:{name}")
                else:
                    probes.setdefault(probe, {})[name] = Declaration.of_metric(pdecl)
    return MetricDeclarations(workloads=workloads, probes=probes, undeclared=sorted(undeclared))

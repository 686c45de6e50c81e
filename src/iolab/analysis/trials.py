"""Reading the results document: trials by configuration, their labels, the run's settings."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from pydantic import ValidationError

from iolab.core import metrics, registry
from iolab.probes import registry as probe_registry
from iolab.studies.spec import StudySettings


def labels_of(trial: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in trial["params"].items() if not k.startswith("_")}


def label_text(trial: dict[str, Any], fallback: str = "") -> str:
    return ", ".join(f"{k}={v}" for k, v in labels_of(trial).items()) or fallback


def config_of(trial: dict[str, Any]) -> str:
    """The configuration id: a trial id is '<config id>-r<repetition>'."""
    return str(trial["id"]).rsplit("-r", 1)[0]


def by_config(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """{config id: its trials in stored (= execution) order}."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in doc["trials"]:
        groups[config_of(t)].append(t)
    return groups


def relative_resolution(trials: list[dict[str, Any]], metric: str) -> float:
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


def workload_of(trial: dict[str, Any]) -> dict[str, Any]:
    w = (trial.get("params") or {}).get("_workload")
    return w if isinstance(w, dict) else {}


def settings_of(doc: dict[str, Any]) -> StudySettings | None:
    """The run's [study] settings, or None when the stored spec does not validate any more."""
    table = (doc.get("spec") or {}).get("study")
    try:
        return StudySettings(**table) if isinstance(table, dict) else None
    except (ValidationError, TypeError):
        return None


def main_metric_of(workload: dict[str, Any], settings: StudySettings | None) -> str | None:
    """The metric adaptive stopping watched for this workload: the study's, else the workload's."""
    if settings is not None and settings.metric:
        return settings.metric
    kind = workload.get("kind")
    if not isinstance(kind, str) or kind not in registry.WORKLOADS:
        return None
    cls = registry.workload_class(kind)
    try:  # some workloads pick their main metric from their parameters (pure: no I/O in __init__)
        return str(cls(cls.Params(**workload)).main_metric)
    except (ValidationError, TypeError, ValueError):
        return getattr(cls, "main_metric", None)


def declarations(doc: dict[str, Any]) -> dict[str, Any]:
    """The declaration (unit, direction, aggregate, description) of every metric the trials
    carry: {"workloads": {kind: {metric: ...}}, "probes": {probe: {key: ...}}}. Nested probe
    values are named 'key.entry'. Undeclared names are listed under "undeclared"."""
    workloads: dict[str, dict[str, Any]] = {}
    probes: dict[str, dict[str, Any]] = {}
    undeclared: set[str] = set()
    for t in doc["trials"]:
        w = workload_of(t)
        kind = str(w.get("kind", "?"))
        ms = metrics.for_workload(w)
        for name in t.get("metrics") or {}:
            decl = ms.get(name)
            if decl is None:
                undeclared.add(f"{kind}:{name}")
            else:
                workloads.setdefault(kind, {})[name] = decl.as_dict()
        for probe, result in (t.get("probes") or {}).items():
            ps, skip = probe_registry.metric_set(probe), set(probe_registry.attributes(probe))
            for name in (n for n in numeric_keys(result) if n.split(".", 1)[0] not in skip):
                decl = ps.get(name)
                if decl is None:
                    undeclared.add(f"probe {probe}:{name}")
                else:
                    probes.setdefault(probe, {})[name] = decl.as_dict()
    return {"workloads": workloads, "probes": probes, "undeclared": sorted(undeclared)}


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

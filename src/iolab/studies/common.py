"""Helpers the built-in studies share: grouping trials by labels, formatting estimates."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from iolab.analysis.stats import Estimate, mean_ci
from iolab.analysis.trials import relative_resolution
from iolab.report.model import Note


def ok_trials(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in doc["trials"] if t["status"] == "ok"]


def group_values(trials: list[dict[str, Any]], keys: Sequence[str], metric: str) -> dict[tuple, list[float]]:
    """{(label values...): [metric per trial]} for trials that have every key and the metric."""
    out: dict[tuple, list[float]] = defaultdict(list)
    for t in trials:
        p = t["params"]
        if all(k in p for k in keys) and metric in t["metrics"]:
            out[tuple(p[k] for k in keys)].append(t["metrics"][metric])
    return out


def group_resolution(trials: list[dict[str, Any]], keys: Sequence[str], metric: str) -> dict[tuple, float]:
    """{(label values...): the largest relative clock error of `metric` among the group's trials}
    (analysis.trials.relative_resolution), for the groups group_values makes."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for t in trials:
        p = t["params"]
        if all(k in p for k in keys) and metric in t["metrics"]:
            groups[tuple(p[k] for k in keys)].append(t)
    return {k: relative_resolution(ts, metric) for k, ts in groups.items()}


def nested(groups: dict[tuple, list[float]], estimator: Callable[..., Estimate] = mean_ci,
           unit: str | None = None, rels: dict[tuple, float] | None = None) -> dict[str, Any]:
    """{(a, b): values} -> {"a": {"b": {mean, ci95[, unit]}}} with string keys (JSON). With `rels`
    (group_resolution), each group's clock error goes to the estimator: estimator(values, rel)."""
    out: dict[str, Any] = {}
    for key, vals in groups.items():
        node = out
        for part in key[:-1]:
            node = node.setdefault(str(part), {})
        est = estimator(vals, rels.get(key, 0.0)) if rels is not None else estimator(vals)
        node[str(key[-1])] = est.as_dict(unit)
    return out


def flags_by(trials: list[dict[str, Any]], keys: Sequence[str]) -> dict[tuple, list[str]]:
    out: dict[tuple, set[str]] = defaultdict(set)
    for t in trials:
        if t.get("flags"):
            out[tuple(t["params"].get(k) for k in keys)].update(t["flags"])
    return {k: sorted(v) for k, v in out.items()}


def resolution_note(trials: list[dict[str, Any]], metric: str) -> Note | None:
    """A note under a table some of whose trials timed passes so short (flag short_run) that the
    tool's clock visibly widened the intervals: how many, and by how much at most, so a wide
    interval reaches the reader with its reason."""
    short = [t for t in trials if any(str(f).startswith("short_run") for f in t.get("flags") or [])]
    if not short:
        return None
    worst = relative_resolution(short, metric)
    return Note(f"{len(short)} of {len(trials)} trials timed passes so short that the tool's millisecond clock alone "
                f"moves the rate by up to {worst:.1%} (flag short_run): the intervals over them include that error "
                "(docs/statistics.md, 'Resolution'). Longer passes (a larger file or size) make them narrower; more "
                "repetitions do not.", "warn")


def fmt_est(est: dict[str, Any] | None) -> dict[str, Any] | str:
    """A table cell: the estimate itself (renderers show 'estimate ± half-width' or '[lo, hi]', with its
    stalls and checks), or '–'."""
    if not est or est.get("mean") is None:
        return "–"
    return est


def size_label(n: int | str) -> str:
    n = int(n)
    for suffix, mult in (("M", 1 << 20), ("k", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)

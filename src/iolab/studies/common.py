"""Helpers the built-in studies share: grouping trials by labels, formatting estimates."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from iolab.analysis.stats import Estimate, mean_ci


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


def nested(groups: dict[tuple, list[float]], estimator: Callable[[list[float]], Estimate] = mean_ci,
           unit: str | None = None) -> dict[str, Any]:
    """{(a, b): values} -> {"a": {"b": {mean, ci95[, unit]}}} with string keys (JSON)."""
    out: dict[str, Any] = {}
    for key, vals in groups.items():
        node = out
        for part in key[:-1]:
            node = node.setdefault(str(part), {})
        node[str(key[-1])] = estimator(vals).as_dict(unit)
    return out


def flags_by(trials: list[dict[str, Any]], keys: Sequence[str]) -> dict[tuple, list[str]]:
    out: dict[tuple, set[str]] = defaultdict(set)
    for t in trials:
        if t.get("flags"):
            out[tuple(t["params"].get(k) for k in keys)].update(t["flags"])
    return {k: sorted(v) for k, v in out.items()}


def fmt_est(est: dict[str, Any] | None) -> dict[str, Any] | str:
    """A table cell: the estimate itself (renderers show 'mean ± half-width' or '[lo, hi]'), or '–'."""
    if not est or est.get("mean") is None:
        return "–"
    return est


def size_label(n: int | str) -> str:
    n = int(n)
    for suffix, mult in (("M", 1 << 20), ("k", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)

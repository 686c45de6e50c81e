"""Helpers the built-in studies share: grouping trials by labels, estimates per group, table cells."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TypeVar

from iolab.analysis.record import Quantity, estimate_json
from iolab.analysis.stats import Estimate, mean_ci
from iolab.analysis.trials import Doc, Trial, relative_resolution
from iolab.report.model import Note

Key = tuple[Hashable, ...]  # a group's label values, in the order of the keys asked for
K = TypeVar("K", bound=tuple[Hashable, ...])


def ok_trials(doc: Doc) -> list[Trial]:
    return [t for t in doc["trials"] if t["status"] == "ok"]


def group_values(trials: list[Trial], keys: Sequence[str], metric: str) -> dict[Key, list[float]]:
    """{(label values...): [metric per trial]} for trials that have every key and the metric."""
    out: dict[Key, list[float]] = defaultdict(list)
    for t in trials:
        p = t["params"]
        if all(k in p for k in keys) and metric in t["metrics"]:
            out[tuple(p[k] for k in keys)].append(t["metrics"][metric])
    return out


def group_resolution(trials: list[Trial], keys: Sequence[str], metric: str) -> dict[Key, float]:
    """{(label values...): the largest relative clock error of `metric` among the group's trials}
    (analysis.trials.relative_resolution), for the groups group_values makes."""
    groups: dict[Key, list[Trial]] = defaultdict(list)
    for t in trials:
        p = t["params"]
        if all(k in p for k in keys) and metric in t["metrics"]:
            groups[tuple(p[k] for k in keys)].append(t)
    return {k: relative_resolution(ts, metric) for k, ts in groups.items()}


def estimates(groups: Mapping[K, list[float]], estimator: Callable[..., Estimate] = mean_ci,
              unit: str | None = None, rels: Mapping[K, float] | None = None) -> dict[K, Estimate]:
    """{key: the estimate of its values} (in `unit`, when given). With `rels` (group_resolution),
    each group's clock error goes to the estimator: estimator(values, rel)."""
    out: dict[K, Estimate] = {}
    for key, vals in groups.items():
        est = estimator(vals, rels.get(key, 0.0)) if rels is not None else estimator(vals)
        out[key] = Quantity.of(est, unit) if unit else est
    return out


def nest2(flat: Mapping[K, Estimate]) -> dict[str, dict[str, Estimate]]:
    """{(a, b): e} -> {"a": {"b": e}}, string keys (JSON), in the order of `flat`."""
    out: dict[str, dict[str, Estimate]] = {}
    for (a, b), e in flat.items():
        out.setdefault(str(a), {})[str(b)] = e
    return out


def nest3(flat: Mapping[K, Estimate]) -> dict[str, dict[str, dict[str, Estimate]]]:
    """{(a, b, c): e} -> {"a": {"b": {"c": e}}}, string keys (JSON), in the order of `flat`."""
    out: dict[str, dict[str, dict[str, Estimate]]] = {}
    for (a, b, c), e in flat.items():
        out.setdefault(str(a), {}).setdefault(str(b), {})[str(c)] = e
    return out


def flags_by(trials: list[Trial], keys: Sequence[str]) -> dict[Key, list[str]]:
    out: dict[Key, set[str]] = defaultdict(set)
    for t in trials:
        if t.get("flags"):
            out[tuple(t["params"].get(k) for k in keys)].update(t["flags"])
    return {k: sorted(v) for k, v in out.items()}


def resolution_note(trials: list[Trial], metric: str) -> Note | None:
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


Cell = dict[str, object] | str  # what fmt_est puts in a table: the estimate object, or '–'


def fmt_est(est: Estimate | None) -> Cell:
    """A table cell: the estimate itself (renderers show 'estimate ± half-width' or '[lo, hi]', with its
    stalls and checks), or '–' (no estimate, or one without a finite value)."""
    if est is None or est.mean != est.mean or est.mean in (float("inf"), float("-inf")):
        return "–"
    return estimate_json(est)


def size_label(n: int | str) -> str:
    n = int(n)
    for suffix, mult in (("M", 1 << 20), ("k", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)

"""Analysis for any study: per configuration, every metric's estimate (the median of the
repetitions; a count's mean) with its interval and run-order checks, its unit, direction and
range from the declarations the trials stored, and its failed attempts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue

from iolab.analysis import checks, flags
from iolab.analysis.findings import Findings
from iolab.analysis.flags import FlagDetail
from iolab.analysis.record import Est, JSONObject, Quantity, Record, estimate_json, plotted
from iolab.analysis.repetitions import failed_text
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import (
    Doc,
    by_config,
    labels_of,
    main_metric_of,
    metric_set_of,
    relative_resolution,
    settings_of,
)
from iolab.core import metrics
from iolab.core.metrics import REAL
from iolab.report.model import Chart, Note, Section, Series, Table

__all__ = ["findings", "analyze", "present", "by_config", "labels_of"]

# Shown in the table after each configuration's main metric, when measured.
HEADLINE_METRICS = ("iops", "bw_mib_s", "throughput_mib_s", "read_clat_p99_us", "write_clat_p99_us")
MAX_COLUMNS = 5


class ConfigResult(Record):
    """One configuration: its labels, every metric's estimate (with unit and direction), its main
    metric, attempts and failures, undeclared metrics, flags with their meaning, errors."""

    config_id: str
    labels: dict[str, JsonValue]
    n_ok: int
    n_failed: int
    attempts: int
    failed_of: str
    main_metric: str | None
    metrics: dict[str, Est]
    undeclared: list[str]
    flags: list[str]
    flag_details: list[FlagDetail]
    errors: list[str]


class GenericFindings(Findings):
    """The findings of a run without a study of its own (docs/results.md, generic)."""

    configs: list[ConfigResult]
    interval_method: str


def findings(doc: Doc) -> GenericFindings:
    est = RunEstimator(doc)
    settings = settings_of(doc)
    configs = []
    for cid, trials in by_config(doc).items():
        ok = [t for t in trials if t["status"] == "ok"]
        declared = metric_set_of(trials)
        names = sorted({m for t in ok for m in t["metrics"]})
        values = {m: [t["metrics"].get(m) for t in ok] for m in names}
        failed = len(trials) - len(ok)
        out: dict[str, Estimate] = {}
        for m in names:
            decl = declared.get(m)
            e = est.of(decl if decl else REAL, values[m], relative_resolution(ok, m))
            out[m] = Quantity.of(e, decl.unit if decl else None, decl.direction if decl else "neither")
        configs.append(ConfigResult(
            config_id=cid, labels=labels_of(trials[0]), n_ok=len(ok), n_failed=failed, attempts=len(trials),
            failed_of=failed_text(failed, len(trials)), main_metric=main_metric_of(trials, settings), metrics=out,
            undeclared=declared.undeclared(names),
            flags=sorted({flags.name_of(f) for t in ok for f in t.get("flags", [])}), flag_details=flags.details(ok),
            errors=sorted({t["error"] for t in trials if t["error"]})))
    return GenericFindings(configs=configs, interval_method=f"looks {est.design.label()}")


def analyze(doc: Doc) -> JSONObject:
    """The findings as the results document holds them (docs/results.md)."""
    return findings(doc).to_json()


def _shown(configs: list[ConfigResult]) -> list[str]:
    order: list[str] = []
    for m in [c.main_metric for c in configs] + list(HEADLINE_METRICS):
        if m and m not in order and any(m in c.metrics for c in configs):
            order.append(m)
    return order[:MAX_COLUMNS]


def _header(m: str, configs: list[ConfigResult]) -> str:
    unit = next((_unit(c.metrics[m]) for c in configs if m in c.metrics), None)
    return f"{m} ({unit})" if unit else m


def _unit(e: Estimate) -> str | None:
    return e.unit if isinstance(e, Quantity) else None


def _label(c: ConfigResult) -> str:
    return ", ".join(f"{k}={v}" for k, v in c.labels.items()) or c.config_id


def present(doc: Doc, f: GenericFindings | Mapping[str, Any]) -> tuple[list[str], list[Section]]:
    typed = GenericFindings.coerce(f)
    configs = typed.configs
    label_keys = sorted({k for c in configs for k in c.labels})
    shown = _shown(configs)
    rows, notes = [], []
    for c in configs:
        row: list[Any] = [c.labels.get(k) for k in label_keys]
        row += [estimate_json(c.metrics[m]) if m in c.metrics else "–" for m in shown]
        row += [c.n_ok, c.failed_of, ", ".join(c.flags)]
        rows.append(row)
        for err in c.errors:
            notes.append(Note(f"{c.config_id}: {err}", "warn"))
        label = _label(c)
        for d in c.flag_details:
            notes.append(Note(f"{label}: {flags.sentence(d)}", "warn"))
        zeros = {m: e.zeros for m, e in c.metrics.items() if e.zeros and e.domain != "count"}
        for m, k in zeros.items():
            notes.append(Note(f"{c.config_id}: {k} trial(s) with {m} = 0 (stalled?): in the estimate and its "
                              "interval, never dropped", "warn"))
        for m, e in c.metrics.items():
            tripped = [k for k in e.checks if k != checks.INDEPENDENCE_ASSUMED]
            if tripped:
                notes.append(Note(f"{label}: {m}: " + "; ".join(f"{k} — {checks.MEANING[k]}" for k in tripped)
                                  + ": no 95 % is claimed for it", "warn"))
        if c.undeclared:
            notes.append(Note(f"{c.config_id}: metrics without a declaration (no unit or direction): "
                              + ", ".join(c.undeclared), "warn"))
    if any(checks.INDEPENDENCE_ASSUMED in e.checks for c in configs for e in c.metrics.values()):
        # the design's, not a configuration's: said once, not once per number
        notes.insert(0, Note(f"⚑ {checks.INDEPENDENCE_ASSUMED}: {checks.MEANING[checks.INDEPENDENCE_ASSUMED]}",
                             "warn"))
    title = f"Per configuration (median of the repetitions and its interval, {typed.interval_method})"
    table = Table(title, label_keys + [_header(m, configs) for m in shown] + ["n ok", "failed", "flags"], rows,
                  notes=notes)
    blocks: list[Any] = [table]
    if shown:
        m = shown[0]
        decl = _declaration(doc, m)
        points = [plotted(c.metrics.get(m)) for c in configs]
        blocks.append(Chart(f"{m} per configuration", "bar", "configuration",
                            decl.axis_label() if decl else m, [Series(
                                m, [_label(c) for c in configs], [p[0] for p in points], [p[1] for p in points],
                                [p[2] for p in points])]))
    failed = sum(c.n_failed for c in configs)
    summary = [f"{len(configs)} configuration(s), {sum(c.n_ok for c in configs)} successful trial(s)"
               + (f", {failed} failed attempt(s)" if failed else "")]
    return summary, [Section("Results", blocks)]


def _declaration(doc: Doc, name: str) -> metrics.Metric | None:
    for t in doc["trials"]:
        decl = metric_set_of([t]).get(name)
        if decl is not None:
            return decl
    return None

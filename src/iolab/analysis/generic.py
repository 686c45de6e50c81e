"""Analysis for any study: per configuration, every metric's estimate (the median of the
repetitions; a count's mean) with its interval and run-order checks, its unit, direction and
range from the workload's declarations, and its failed attempts."""

from __future__ import annotations

from typing import Any

from iolab.analysis import checks, flags
from iolab.analysis.repetitions import failed_text
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.trials import (
    by_config,
    labels_of,
    main_metric_of,
    relative_resolution,
    settings_of,
    workload_of,
)
from iolab.core import metrics
from iolab.core.metrics import REAL
from iolab.report.model import Chart, Note, Section, Series, Table

__all__ = ["analyze", "present", "by_config", "labels_of"]

# Shown in the table after each configuration's main metric, when measured.
HEADLINE_METRICS = ("iops", "bw_mib_s", "throughput_mib_s", "read_clat_p99_us", "write_clat_p99_us")
MAX_COLUMNS = 5


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    est = RunEstimator(doc)
    settings = settings_of(doc)
    configs = []
    for cid, trials in by_config(doc).items():
        ok = [t for t in trials if t["status"] == "ok"]
        workload = workload_of(trials[0])
        declared = metrics.for_workload(workload)
        names = sorted({m for t in ok for m in t["metrics"]})
        values = {m: [t["metrics"].get(m) for t in ok] for m in names}
        failed = len(trials) - len(ok)
        out: dict[str, Any] = {}
        for m in names:
            decl = declared.get(m)
            e = est.of(decl if decl else REAL, values[m],
                       relative_resolution(ok, m)).as_dict(decl.unit if decl else None)
            e["direction"] = decl.direction if decl else "neither"
            out[m] = e
        configs.append({
            "config_id": cid, "labels": labels_of(trials[0]), "n_ok": len(ok), "n_failed": failed,
            "attempts": len(trials), "failed_of": failed_text(failed, len(trials)),
            "main_metric": main_metric_of(workload, settings),
            "metrics": out, "undeclared": declared.undeclared(names),
            "flags": sorted({flags.name_of(f) for t in ok for f in t.get("flags", [])}),
            "flag_details": flags.details(ok),
            "errors": sorted({t["error"] for t in trials if t["error"]}),
        })
    return {"configs": configs, "interval_method": f"looks {est.design.label()}"}


def _shown(configs: list[dict[str, Any]]) -> list[str]:
    order: list[str] = []
    for m in [c["main_metric"] for c in configs] + list(HEADLINE_METRICS):
        if m and m not in order and any(m in c["metrics"] for c in configs):
            order.append(m)
    return order[:MAX_COLUMNS]


def _header(m: str, configs: list[dict[str, Any]]) -> str:
    unit = next((c["metrics"][m].get("unit") for c in configs if m in c["metrics"]), None)
    return f"{m} ({unit})" if unit else m


def present(doc: dict[str, Any], findings: dict[str, Any]) -> tuple[list[str], list[Section]]:
    configs = findings["configs"]
    label_keys = sorted({k for c in configs for k in c["labels"]})
    shown = _shown(configs)
    rows, notes = [], []
    for c in configs:
        row: list[Any] = [c["labels"].get(k) for k in label_keys]
        row += [c["metrics"].get(m) or "–" for m in shown]
        row += [c["n_ok"], c["failed_of"], ", ".join(c["flags"])]
        rows.append(row)
        for e in c["errors"]:
            notes.append(Note(f"{c['config_id']}: {e}", "warn"))
        label = ", ".join(f"{k}={v}" for k, v in c["labels"].items()) or c["config_id"]
        for d in c.get("flag_details") or []:
            notes.append(Note(f"{label}: {flags.sentence(d)}", "warn"))
        zeros = {m: e["zeros"] for m, e in c["metrics"].items() if e.get("zeros") and e.get("domain") != "count"}
        for m, k in zeros.items():
            notes.append(Note(f"{c['config_id']}: {k} trial(s) with {m} = 0 (stalled?): in the estimate and its "
                              "interval, never dropped", "warn"))
        for m, e in c["metrics"].items():
            if e.get("checks"):
                notes.append(Note(f"{label}: {m}: " + "; ".join(f"{k} — {checks.MEANING[k]}" for k in e["checks"])
                                  + ": no 95 % is claimed for it", "warn"))
        if c["undeclared"]:
            notes.append(Note(f"{c['config_id']}: metrics without a declaration (no unit or direction): "
                              + ", ".join(c["undeclared"]), "warn"))
    title = f"Per configuration (median of the repetitions and its interval, {findings.get('interval_method', 't')})"
    table = Table(title, label_keys + [_header(m, configs) for m in shown] + ["n ok", "failed", "flags"], rows,
                  notes=notes)
    blocks: list[Any] = [table]
    if shown:
        m = shown[0]
        decl = _declaration(doc, m)
        blocks.append(Chart(f"{m} per configuration", "bar", "configuration",
                            decl.axis_label() if decl else m, [Series(
                                m, [", ".join(f"{k}={v}" for k, v in c["labels"].items()) or c["config_id"]
                                    for c in configs],
                                [c["metrics"].get(m, {}).get("mean") for c in configs],
                                [c["metrics"].get(m, {}).get("ci95", [None, None])[0] for c in configs],
                                [c["metrics"].get(m, {}).get("ci95", [None, None])[1] for c in configs])]))
    failed = sum(c["n_failed"] for c in configs)
    summary = [f"{len(configs)} configuration(s), {sum(c['n_ok'] for c in configs)} successful trial(s)"
               + (f", {failed} failed attempt(s)" if failed else "")]
    return summary, [Section("Results", blocks)]


def _declaration(doc: dict[str, Any], name: str) -> metrics.Metric | None:
    for t in doc["trials"]:
        decl = metrics.for_workload(workload_of(t)).get(name)
        if decl is not None:
            return decl
    return None


"""Analysis for any study: per configuration, every metric's mean with its 95% CI."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from iolab.analysis.stats import mean_ci
from iolab.report.model import Chart, Note, Section, Series, Table

HEADLINE_METRICS = ("iops", "bw_mib_s", "throughput_mib_s", "read_clat_p99_us", "write_clat_p99_us")


def labels_of(trial: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in trial["params"].items() if not k.startswith("_")}


def by_config(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in doc["trials"]:
        groups[t["id"].rsplit("-r", 1)[0]].append(t)
    return groups


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    configs = []
    for cid, trials in by_config(doc).items():
        ok = [t for t in trials if t["status"] == "ok"]
        names = sorted({m for t in ok for m in t["metrics"]})
        configs.append({
            "config_id": cid, "labels": labels_of(trials[0]), "n_ok": len(ok), "n_failed": len(trials) - len(ok),
            "metrics": {m: mean_ci([t["metrics"][m] for t in ok if m in t["metrics"]]).as_dict() for m in names},
            "flags": sorted({f.split(":")[0] for t in ok for f in t.get("flags", [])}),
            "errors": sorted({t["error"] for t in trials if t["error"]}),
        })
    return {"configs": configs}


def present(doc: dict[str, Any], findings: dict[str, Any]) -> tuple[list[str], list[Section]]:
    configs = findings["configs"]
    label_keys = sorted({k for c in configs for k in c["labels"]})
    shown = [m for m in HEADLINE_METRICS if any(m in c["metrics"] for c in configs)]
    rows, notes = [], []
    for c in configs:
        row: list[Any] = [c["labels"].get(k) for k in label_keys]
        row += [c["metrics"].get(m) or "–" for m in shown]
        row += [f"{c['n_ok']}/{c['n_ok'] + c['n_failed']}", ", ".join(c["flags"])]
        rows.append(row)
        for e in c["errors"]:
            notes.append(Note(f"{c['config_id']}: {e}", "warn"))
    table = Table("Per configuration (mean ± 95% CI half-width)", label_keys + shown + ["ok/trials", "flags"], rows,
                  notes=notes)
    blocks: list[Any] = [table]
    if shown:
        m = shown[0]
        blocks.append(Chart(f"{m} per configuration", "bar", "configuration", m, [Series(
            m, [", ".join(f"{k}={v}" for k, v in c["labels"].items()) or c["config_id"] for c in configs],
            [c["metrics"].get(m, {}).get("mean") for c in configs],
            [c["metrics"].get(m, {}).get("ci95", [None, None])[0] for c in configs],
            [c["metrics"].get(m, {}).get("ci95", [None, None])[1] for c in configs])]))
    summary = [f"{len(configs)} configuration(s), {sum(c['n_ok'] for c in configs)} successful trial(s)"]
    return summary, [Section("Results", blocks)]

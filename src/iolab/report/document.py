"""The results document (the JSON contract of docs/results.md) built from the store."""

from __future__ import annotations

from typing import Any

from iolab.report.model import Section
from iolab.store.sqlite import RunRecord, Store
from iolab.studies import builtin


def results_document(store: Store, run: RunRecord) -> dict[str, Any]:
    """Everything but findings: run, environment and every trial."""
    trials = [{
        "id": t.trial_id, "params": t.params, "repetition": t.repetition, "status": t.status, "error": t.error,
        "metrics": t.metrics, "probes": t.probes, "flags": t.flags, "manifest": t.manifest,
        "started": t.started, "ended": t.ended,
    } for t in store.trials(run.id)]
    status = {"running": "partial"}.get(run.status, run.status)
    return {"run_id": run.id, "study": run.study, "status": status, "source": run.source,
            "spec": run.spec, "options": run.options, "environment": run.environment, "extra": run.extra,
            "trials": trials, "findings": {}}


def analysed(store: Store, run: RunRecord) -> tuple[dict[str, Any], list[str], list[Section]]:
    """(document with findings, headline lines, report sections)."""
    doc = results_document(store, run)
    analysis = (run.spec.get("study") or {}).get("analysis", "generic")
    module = builtin.analysis_module(analysis)
    doc["findings"] = module.analyze(doc) if doc["trials"] else {}
    summary, sections = module.present(doc, doc["findings"]) if doc["trials"] else (["no trials ran"], [])
    return doc, summary, sections

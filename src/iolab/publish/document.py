"""The results document (the JSON contract of docs/results.md) built from the store."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from iolab.analysis import budget as budgets
from iolab.analysis import repetitions
from iolab.analysis.budget_record import BudgetSection
from iolab.analysis.trials import declarations
from iolab.analysis.verdicts import ReportedVerdict
from iolab.core import paths
from iolab.core.errors import InputError
from iolab.publish.integrity import check_document
from iolab.report.model import Section
from iolab.report.render import render
from iolab.store.base import RunRecord, Store
from iolab.studies import builtin

REPRODUCE = "reproduce"
AB = "ab"  # an A/B study (runner/ab.py): its blocks' runs are its children, as a reproduction's studies


def results_document(store: Store, run: RunRecord) -> dict[str, Any]:
    """Everything but findings: run, environment and every trial."""
    trials = [{
        "id": t.trial_id, "params": t.params, "repetition": t.repetition, "status": t.status, "error": t.error,
        "metrics": t.metrics, "probes": t.probes, "flags": t.flags, "manifest": t.manifest,
        "started": t.started, "ended": t.ended, "traceback": t.traceback,
    } for t in store.trials(run.id)]
    status = {"running": "partial"}.get(run.status, run.status)
    doc: dict[str, Any] = {"run_id": run.id, "study": run.study, "status": status, "created": run.created,
           "source": run.source,
           "spec": run.spec, "options": run.options, "environment": run.environment, "extra": run.extra,
           "trials": trials, "findings": {}}
    check_document(doc, store.location)
    if analysis_of(run) in (REPRODUCE, AB):
        doc["children"] = _children(store, run)
        kids = [c["doc"]["trials"] for c in doc["children"].values()]
        failed = sum(t["status"] != "ok" for ts in kids for t in ts)
        total = sum(len(ts) for ts in kids)
        doc["trial_counts"] = {"total": total, "ok": total - failed, "failed": failed}
    return doc


def verdict_source(store: Store, verdicts: Callable[[dict[str, Any]], list[ReportedVerdict]]
                   ) -> Callable[[str], list[ReportedVerdict]]:
    """run id -> `verdicts` of that run's document as stored now: what a time budget spends on
    between rounds (runner/schedule.py)."""
    return lambda run_id: verdicts(results_document(store, store.resolve(run_id)))


def analysis_of(run: RunRecord) -> str:
    return str((run.spec.get("study") or {}).get("analysis", "generic"))


def default_report_path(run_id: str) -> Path:
    return paths.reports_dir() / run_id / "report.html"


def _children(store: Store, run: RunRecord) -> dict[str, Any]:
    """A reproduction's studies, each with its analysed document (what its claims are read from)."""
    out: dict[str, Any] = {}
    for name, run_id in (run.extra.get("children") or {}).items():
        rec = store.resolve(run_id)
        doc, _, _ = analysed(store, rec)
        ok = sum(t["status"] == "ok" for t in doc["trials"])
        out[name] = {"run_id": rec.id, "status": doc["status"], "trials_ok": f"{ok}/{len(doc['trials'])}",
                     "report": str(default_report_path(rec.id)), "doc": doc}
    return out


def analysed(store: Store, run: RunRecord, report_dir: Path | None = None
             ) -> tuple[dict[str, Any], list[str], list[Section]]:
    """(document with findings, headline lines, report sections). `report_dir`: where the HTML goes,
    so links to other reports can be relative."""
    doc = results_document(store, run)
    if report_dir is not None:
        doc["report_dir"] = str(report_dir)
    return analyse_document(doc)


def analyse_document(doc: dict[str, Any]) -> tuple[dict[str, Any], list[str], list[Section]]:
    """The study's findings and sections, plus what every study gets: the declarations of the
    metrics it holds (unit, direction) and a Repetitions section (n, failures, stop reason).
    A reproduction has no trials of its own: its findings come from its children. The study's
    findings are typed (analysis/findings.py); the document holds their JSON (docs/results.md)
    and the presentation reads the typed value."""
    analysis = (doc.get("spec", {}).get("study") or {}).get("analysis", "generic")
    module = builtin.analysis_module(analysis)
    try:
        if doc.get("children") is not None:
            if not hasattr(module, "findings"):  # the A/B verdict (publish/ab.py): its rows are typed in analysis/ab.py
                doc["findings"] = module.analyze(doc)
                return (doc, *module.present(doc, doc["findings"]))
            findings = module.findings(doc)
            doc["findings"] = findings.to_json()
            summary, sections = module.present(doc, findings)
            return doc, summary, sections
        if not doc["trials"]:
            doc["findings"] = {}
            stored = (doc.get("extra") or {}).get("budget")
            if isinstance(stored, dict) and stored.get("exhausted"):  # stopped by its budget, not failed: say so
                rows = [r for r in stored.get("verdicts") or [] if isinstance(r, dict)]
                return (doc, ["no trials ran: the time budget ran out before the first trial",
                              budgets.summary_words(stored, rows)], [budgets.section(stored, rows)])
            return doc, ["no trials ran"], []
        findings = module.findings(doc)  # first: some analyses label the trials they read (iozone's system)
        records = repetitions.configurations(doc)
        findings = findings.model_copy(update={"repetitions": records, "metric_declarations": declarations(doc)})
        doc["findings"] = findings.to_json()
        tail = [repetitions.section(records)]
        budget = (doc.get("extra") or {}).get("budget")
        words: list[str] = []
        if isinstance(budget, dict):  # a run with a time budget: what it decided and what it left open
            rows = _budget_rows(doc, module, budget)
            # typed like the rest of the findings (analysis/budget_record.py): a key it does not
            # declare is an error here, where it is written, not when a page reads it back
            findings = findings.model_copy(update={"budget": BudgetSection.from_json({**budget, "verdicts": rows})})
            doc["findings"] = findings.to_json()
            words.append(budgets.summary_words(budget, rows))
            tail.append(budgets.section(budget, rows))
        summary, sections = module.present(doc, findings)
        return doc, [*summary, *words], [*sections, *tail]
    finally:
        doc.pop("children", None)   # the findings summarise them; each child has its own document
        doc.pop("report_dir", None)


def _budget_rows(doc: dict[str, Any], module: Any, budget: dict[str, Any]) -> list[dict[str, Any]]:
    """Each verdict the budget spent on, decided or left open: recomputed from the trials when the
    run spent on its own study's verdicts, else as the run stored them (a reproduction's claims,
    decided on its page)."""
    fn = getattr(module, "study_verdicts", None)
    stored = [r for r in budget.get("verdicts") or [] if isinstance(r, dict)]
    if fn is None or budget.get("source") != budgets.STUDY_SOURCE:
        return stored
    settings = doc.get("spec", {}).get("study") or {}
    cap = settings.get("max_repetitions")
    max_reps = cap if isinstance(cap, int) else 10
    _, room = budgets.repetitions_left(doc, max_reps)
    times = budgets.trial_times(doc)
    ran_out = bool(budget.get("exhausted")) or budget.get("phase") == "done"
    return budgets.account(fn(doc), room, lambda c: times.get(c, 0.0), ran_out)


def write_html(store: Store, run: RunRecord, output: Path | None = None
               ) -> tuple[Path, dict[str, Any], list[str]]:
    """Write a run's HTML report (default place: the reports dir); returns (path, document, summary)."""
    path = output or default_report_path(run.id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(path, exc) from None
    doc, summary, sections = analysed(store, run, path.parent)
    write_report(path, render(doc, sections, summary, "html"))
    return path, doc, summary


def write_report(path: Path, text: str) -> None:
    """Write a report file; a place that cannot take it (full, read-only) is an input error that
    says where else: the results are in the store either way."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise _unwritable(path, exc) from None


def _unwritable(path: Path, exc: OSError) -> InputError:
    return InputError(f"could not write the report to {path} ({exc.strerror or exc}); the results are in the "
                      "database: `iolab report RUN -o PATH` writes it elsewhere")

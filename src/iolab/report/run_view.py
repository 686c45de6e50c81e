"""What every readable report shows about a run beside its study's sections: the header
(study, run, status, date, machine, TCG warning, trial counts, failures grouped by error)
and the trials appendix (one row a trial: axes, repetition, status, the first metrics,
flags, error).

Decided once here, formatted as text, so the HTML and Markdown reports cannot disagree on
which trials count as failed, which axes and metrics the appendix shows, or how a value is
written; each exporter only lays the view out (HTML through its template, Markdown as
pipe tables) and escapes for its own syntax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from iolab.report.format import (
    failure_groups,
    fmt_num,
    fmt_param,
    is_tcg,
    machine_facts,
    metric_names,
    param_names,
    run_date,
    trial_counts,
)

MAX_TRIAL_METRICS = 8  # the appendix stays readable; the CSV and JSON exports have every metric


@dataclass(frozen=True)
class RunHeader:
    """The facts a reader checks before any result: what ran, when, where, and how much failed."""

    study: str
    run_id: str
    status: str
    date: str
    facts: list[tuple[str, str]]  # (label, value) of the machine: kernel, CPU, accel, ...
    tcg: bool                      # guests ran under software emulation: speeds are not representative
    counts: dict[str, int]         # total, ok, failed
    failures: list[dict[str, Any]]  # failure_groups: error, count, ids, where


def run_header(doc: dict[str, Any]) -> RunHeader:
    env = doc.get("environment") or {}
    return RunHeader(
        study=str(doc.get("study") or "study"),
        run_id=str(doc.get("run_id") or "—"),
        status=str(doc.get("status") or "unknown"),
        date=run_date(doc),
        facts=machine_facts(env),
        tcg=is_tcg(env),
        counts=trial_counts(doc),
        failures=failure_groups(doc.get("trials") or []),
    )


@dataclass(frozen=True)
class Flag:
    """A trial's flag: its kind (the text before ':', shown as a label) and the whole text."""

    name: str
    text: str


@dataclass(frozen=True)
class TrialRow:
    id: str
    params: list[str]   # formatted values of TrialsAppendix.params ("—" where the trial has none)
    repetition: str
    status: str
    error: str
    metrics: list[str]  # formatted values of TrialsAppendix.metrics
    flags: list[Flag]

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class TrialsAppendix:
    params: list[str]    # axis names, first-seen order
    metrics: list[str]   # the first MAX_TRIAL_METRICS metric names, in the order workloads report them
    hidden_metrics: int  # how many more each trial has (in the CSV and JSON exports)
    rows: list[TrialRow]


def trials_appendix(trials: list[dict[str, Any]]) -> TrialsAppendix:
    params = param_names(trials)
    metrics = metric_names(trials)
    shown = metrics[:MAX_TRIAL_METRICS]
    rows = []
    for t in trials:
        p, m = t.get("params") or {}, t.get("metrics") or {}
        rows.append(TrialRow(
            id=str(t.get("id", "")),
            params=[fmt_param(p.get(k), k) for k in params],
            repetition=str(t.get("repetition", "")),
            status=str(t.get("status", "")),
            error=str(t.get("error") or ""),
            metrics=[fmt_num(m.get(k)) for k in shown],
            flags=[Flag(str(f).split(":", 1)[0].strip(), str(f)) for f in t.get("flags") or []],
        ))
    return TrialsAppendix(params, shown, len(metrics) - len(shown), rows)

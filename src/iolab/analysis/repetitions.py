"""Per configuration: how many repetitions succeeded and failed, why it stopped there, and
which interval method its estimates use. Shown in every report, whatever the study, so a
failed attempt or a stalled trial is never hidden inside a mean."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from iolab.analysis import calibration, checks
from iolab.analysis.plan import StopRule, run_dependence
from iolab.analysis.record import Record
from iolab.analysis.sequential import design_of, method_of
from iolab.analysis.stats import RESOLUTION_METHOD
from iolab.analysis.trials import (
    Doc,
    by_config,
    label_text,
    main_metric_of,
    metric_set_of,
    relative_resolution,
    settings_of,
)
from iolab.report.model import Note, Section, Table
from iolab.spec.study import StudySettings

# The error of the one record a study hook's skip leaves (runner/runner.py): a decision, not a failure.
SKIPPED = "skipped by study hook"
# A clock error worth a note next to the configuration: the flag short_run's threshold (1 %).
SHORT_CLOCK_ERROR = 0.01


def failed_text(failed: int, attempts: int) -> str:
    return f"{failed} failed of {attempts}"


class ConfigRepetitions(Record):
    """One configuration's repetitions: how many succeeded and failed, the metric that decided when
    to stop and why it stopped there, the interval method, the tool's clock error on that metric
    and the run-order checks that tripped (findings.repetitions)."""

    config_id: str
    label: str
    ok: int
    failed: int
    attempts: int
    failed_of: str
    main_metric: str | None
    zero_values: int
    stop_reason: str
    interval_method: str
    clock_error: float
    checks: list[str]


def configurations(doc: Doc) -> list[ConfigRepetitions]:
    """One record per configuration, from its stored trials and the declarations they carry."""
    settings = settings_of(doc) or StudySettings(name="unknown")
    design = design_of(doc)
    spent = bool(((doc.get("extra") or {}).get("budget") or {}).get("exhausted"))  # a time budget ran out
    out = []
    configs = by_config(doc)
    mains = {cid: main_metric_of(trials, settings) for cid, trials in configs.items()}
    series = {cid: [_num(t["metrics"].get(mains[cid])) for t in trials if t["status"] == "ok"] if mains[cid] else []
              for cid, trials in configs.items()}
    dependent = {m: run_dependence([series[c] for c in configs if mains[c] == m]) for m in set(mains.values()) if m}
    for cid, trials in configs.items():
        ok = [t for t in trials if t["status"] == "ok"]
        failed = len(trials) - len(ok)
        main = mains[cid]
        decl = metric_set_of(trials).get(main) if main else None
        values = series[cid]
        run_dependent = bool(main and dependent.get(main))
        rule = StopRule.of(settings, decl)
        zeros = sum(1 for v in values if v == 0.0)
        skipped = next((t["error"] for t in trials if (t.get("error") or "").startswith(SKIPPED)), None)
        clock = relative_resolution(ok, main) if main else 0.0
        method = method_of(design.covering(len(values)), decl.range if decl else rule.domain,
                           "natural scale")
        data = [v for v in values if math.isfinite(v)]
        trips = list(checks.names(checks.tripped(np.asarray(data), calibration.check_thresholds(len(data)))))
        if run_dependent and "dependence" not in trips:
            trips.append("dependence")
        out.append(ConfigRepetitions(
            config_id=cid, label=label_text(trials[0], cid), ok=len(ok), failed=failed, attempts=len(trials),
            failed_of=failed_text(failed, len(trials)), main_metric=main, zero_values=zeros,
            stop_reason=(f"skipped by the study's hook: {skipped.split(': ', 1)[-1]}" if skipped and not ok
                         else _under_budget(rule.stop_reason(values, failed, run_dependent), spent)),
            interval_method=method + (RESOLUTION_METHOD if clock > 0 else ""), clock_error=clock, checks=trips))
    return out


def _under_budget(reason: str, spent: bool) -> str:
    """A configuration short of its minimum or cap because the run's time budget ran out says so."""
    if spent and reason.startswith("short of"):
        return reason.split(" (", 1)[0] + " (the time budget was spent)"
    return reason


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _clock_notes(records: list[ConfigRepetitions]) -> list[Note]:
    """One note for every configuration whose tool clock moves its main metric by more than 1 %:
    how many, the range, the worst; the table's clock-error column has each."""
    coarse = sorted((r for r in records if r.clock_error > SHORT_CLOCK_ERROR), key=lambda r: r.clock_error)
    if not coarse:
        return []
    worst = coarse[-1]
    return [Note(f"{len(coarse)} of {len(records)} configurations timed passes of a few milliseconds: the tool's clock "
                 f"alone moves their main metric by {coarse[0].clock_error:.1%} to {worst.clock_error:.1%} "
                 f"(worst: {worst.label}). Their intervals include that error; a longer pass narrows it, more "
                 "repetitions do not.", "warn")]


INTRO = ("Each number is the median of its configuration's successful repetitions (the mean per trial for "
         "counts of events), with an interval that holds 95 % at the repetition the runner stopped on, for "
         "skewed, heavy-tailed and two-group noise alike, and never leaves the metric's range. A number marked "
         "with a check (trend, dependence, two_modes) is not covered by that 95 %: its repetitions drifted, "
         "followed each other or fell in two groups, which no interval over this few values can repair; the "
         "runner repeated it up to the cap. '±resolution': widened by the tool's own clock or histogram "
         "(docs/statistics.md).")


def checks_run(n: int) -> str:
    """The run-order checks column of a configuration where none tripped: "—" when every check could
    have at its n values, else which could not (checks.possible): at five values only two_modes can."""
    if n < checks.CHECK_FROM:
        return f"not run: fewer than {checks.CHECK_FROM} values"
    ran = checks.possible(n, calibration.check_thresholds(n))
    missing = [c for c in checks.CHECKS if c not in ran]
    if not missing:
        return "—"
    return f"{', '.join(missing)}: cannot trip at {n} values" + (f" ({', '.join(ran)} ran)" if ran else "")


def section(records: list[ConfigRepetitions]) -> Section:
    """The report's 'Repetitions' section: n, failures, the stop reason and the interval method."""
    rows = [[r.label, r.ok, r.failed_of, r.main_metric or "—", r.stop_reason, r.interval_method,
             f"±{r.clock_error:.1%}" if r.clock_error else "—", ", ".join(r.checks) or checks_run(r.ok)]
            for r in records]
    notes = [Note(f"{r.label}: {r.zero_values} trial(s) measured {r.main_metric} = 0 (a stall); "
                  "it is in the estimate and its interval, never dropped", "warn") for r in records if r.zero_values]
    notes += [Note(f"{r.label}: {r.failed_of} attempts failed; failed attempts are not in any estimate "
                   "(see Trials for their errors)", "warn") for r in records if r.failed]
    notes += [Note(f"{r.label}: {r.main_metric}: " + "; ".join(f"{c} — {checks.MEANING[c]}" for c in r.checks)
                   + ": no 95 % is claimed for it", "warn") for r in records if r.checks]
    notes += _clock_notes(records)
    return Section("Repetitions", [Table("Repetitions per configuration",
                                         ["configuration", "n ok", "failed", "stopping metric", "why it stopped here",
                                          "interval method", "clock error", "run-order checks"], rows, notes=notes)],
                   intro=INTRO)

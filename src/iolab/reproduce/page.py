"""The reproduction's page: every published claim, this machine's value, the verdict and why.

findings(), analyze() and present() follow the study interface (analysis pure, on a results document):
the document of a reproduction carries its child studies' documents under "children"
(see publish/document.py), so the page is recomputed from stored runs and tested on fixtures.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Mapping
from typing import Any

from iolab.analysis import budget as spend
from iolab.analysis.budget_record import BudgetSection
from iolab.analysis.findings import Findings
from iolab.analysis.record import JSONObject, Record
from iolab.analysis.sequential import LookDesign
from iolab.analysis.trials import Doc
from iolab.analysis.verdicts import ReportedVerdict
from iolab.report.model import Link, Note, Section, Table, Tag, Tone
from iolab.reproduce import claims
from iolab.reproduce.claims import ClaimRow, PageFamily
from iolab.reproduce.plan import REFERENCES

VERDICT_ORDER = (claims.HOLDS, claims.DIFFERS, claims.UNDECIDED, claims.UNTESTABLE)
TONES: dict[str, Tone] = {claims.HOLDS: "good", claims.DIFFERS: "bad", claims.UNDECIDED: "warn",
                          claims.UNTESTABLE: "neutral"}


class ChildRun(Record):
    """One study this reproduction ran: its run, status, trials ok and its own report."""

    run_id: str | None = None
    status: str | None = None
    trials_ok: str | None = None
    report: str | None = None


class PageFindings(Findings):
    """docs/results.md, reproduce: every claim's row, the count per verdict, the family, the runs."""

    quick: bool
    claims: list[ClaimRow]
    counts: dict[str, int]
    family: PageFamily
    studies: dict[str, ChildRun]


def findings(doc: Doc) -> PageFindings:
    children = {name: c["doc"] for name, c in (doc.get("children") or {}).items() if c.get("doc")}
    quick = bool((doc.get("options") or {}).get("quick"))
    rows = claims.evaluate(children, quick)
    counts = Counter(r.verdict for r in rows)
    out = PageFindings(quick=quick, claims=rows, counts={v: counts.get(v, 0) for v in VERDICT_ORDER},
                       family=claims.family_of(rows),
                       studies={name: _child_run(name, c) for name, c in (doc.get("children") or {}).items()})
    budget = budget_of(doc, rows)
    return out if budget is None else out.model_copy(update={"budget": BudgetSection.from_json(budget)})


def _child_run(name: str, c: Mapping[str, Any]) -> ChildRun:
    """A study's row in 'Study runs': its status says when the time budget, not a failure, stopped it."""
    run = ChildRun(**{k: v for k, v in c.items() if k != "doc"})
    cut = spend.cut_short(c.get("doc") or {}, name)
    if cut is None or run.status == "complete":
        return run
    stopped = "not reached: the budget ran out before its first trial" if not (c.get("doc") or {}).get("trials") \
        else "stopped by the budget inside its minimum"
    return run.model_copy(update={"status": f"{run.status} ({stopped})"})


def budget_of(doc: Doc, rows: list[ClaimRow]) -> JSONObject | None:
    """The reproduction's time budget (or its quick studies' own) and, for each claim of a study that
    ran under one, whether the budget decided it or left it open, with what it would take. None:
    no budget anywhere."""
    own = (doc.get("extra") or {}).get("budget")
    kids = {name: c.get("doc") or {} for name, c in (doc.get("children") or {}).items()}
    studies: dict[str, JSONObject] = {}
    verdicts: list[JSONObject] = []
    for r in rows:
        child = kids.get(r.study) or {}
        b = (child.get("extra") or {}).get("budget")
        if not isinstance(b, dict):
            continue
        cut = spend.cut_short(child, r.study)
        studies[r.study] = {**{k: b.get(k) for k in ("seconds", "spent_s", "exhausted", "hard")},
                            "reached": bool(child.get("trials"))}
        cap = ((child.get("spec") or {}).get("study") or {}).get("max_repetitions")
        _, room = spend.repetitions_left(child, cap if isinstance(cap, int) else 10)
        times = spend.trial_times(child)
        ran_out = bool(b.get("exhausted")) or b.get("phase") == "done"
        verdict = ReportedVerdict(r.id, r.claim, r.verdict, r.decide)
        [row] = spend.account([verdict], room, functools.partial(_time_of, times), ran_out, cut)
        verdicts.append({**row, "study": r.study, "reference": r.reference})
    if not isinstance(own, dict) and not studies:
        return None
    total: JSONObject
    if isinstance(own, dict):
        total = {k: own.get(k) for k in ("seconds", "spent_s", "exhausted", "plan") if k in own}
    else:  # each quick study had its own budget
        total = {"seconds": sum(float(v.get("seconds") or 0) for v in studies.values()),
                 "spent_s": sum(float(v.get("spent_s") or 0) for v in studies.values()),
                 "exhausted": any(v.get("exhausted") for v in studies.values()), "per_study": True}
    return {**total, "studies": studies, "verdicts": verdicts}


def analyze(doc: Doc) -> JSONObject:
    """The findings as the results document holds them (docs/results.md)."""
    return findings(doc).to_json()


def present(doc: Doc, f: PageFindings | Mapping[str, object]) -> tuple[list[str], list[Section]]:
    f = PageFindings.coerce(f)
    counts = f.counts
    fam = f.family
    summary = [f"{len(f.claims)} published claims: " + ", ".join(f"{counts.get(v, 0)} {v}" for v in VERDICT_ORDER),
               family_words(fam)]
    summary += [f"{r.id} {r.verdict}: {r.reason}" for r in f.claims if r.verdict == claims.DIFFERS]
    budget = f.budget.to_json() if f.budget is not None else None
    under = {str(r["id"]): r for r in (budget or {}).get("verdicts") or []}
    if budget:
        summary.append(spend.summary_words(budget, [r for r in under.values() if r["status"] != spend.NOT_TESTABLE]))
    base = doc.get("report_dir")
    sections = []
    for ref, title, study in REFERENCES:
        rows = [r for r in f.claims if r.reference == ref]
        if not rows:
            continue
        child = f.studies.get(study) or ChildRun()
        link = _link(child, base)
        columns = ["claim", "this machine", "verdict", "why", "rule"] + (["under the budget"] if under else [])
        table = Table("Published claims and this machine", columns,
                      [[r.claim, r.value, Tag(r.verdict, TONES[r.verdict]), r.reason, r.rule]
                       + ([_budget_tag(under.get(r.id))] if under else []) for r in rows])
        blocks: list[Table] = [table]
        if link:
            blocks.append(Table("Study run", ["study", "run", "status", "trials ok"],
                                [[study, link, child.status, child.trials_ok]]))
        sections.append(Section(f"{ref}: {title}", blocks))
    studies: list[list[object]] = [[name, _link(c, base) or c.run_id or "–", c.status, c.trials_ok]
                                   for name, c in f.studies.items()]
    sections.append(Section("Study runs", [Table("The studies this reproduction ran",
                                                 ["study", "run (its full report)", "status", "trials ok"], studies)],
                            intro="Each study has its own full report with every number, chart and trial."))
    if budget:
        sections.insert(0, budget_section(budget))
    sections.insert(0, Section("How the verdicts are decided", [Note(family_words(fam), "info")], intro=(
        "holds: every interval the claim reads lies inside its band (or beyond its threshold; for a claim of "
        "equality, an equivalence test); differs: an interval lies wholly outside it; undecided: an interval "
        "straddles an edge, and the reason says how many more repetitions would likely decide it (or a time budget "
        "left the claim unmeasured: 'left open by the budget'); not testable "
        "here: this machine or this run cannot answer it. An interval that merely touches a band decides "
        "nothing (docs/reproduce.md).")))
    if f.quick:
        why = ("This reproduction's time budget could not afford the full studies' minimum, so every study ran its "
               "quick matrix, as `iolab reproduce --quick`: reduced matrices," if (doc.get("options") or {})
               .get("quick_by_budget") else "This is `iolab reproduce --quick`: reduced matrices,")
        sections.insert(0, Section("Quick reproduction", [Note(
            f"{why} so claims that need the full matrix (more groups, "
            "the application beside the groups, every record size) are 'not testable here'. Run `iolab reproduce` "
            "for all of them." + ("" if isinstance((doc.get("extra") or {}).get("budget"), dict) else
            " Three repetitions per configuration cannot test whether consecutive repetitions are alike: every "
            "interval of a quick run assumes they are independent (⚑ independence_assumed) and is too narrow if "
            "they are not, so its verdicts hold on that assumption (docs/statistics.md).") + _quick_width_words(fam),
            "warn")]))
    return summary, sections


QUICK_REPETITIONS = 3  # the built-in studies' --quick design, 3..3 (studies/*/spec.py)


def _quick_width_words(fam: PageFamily) -> str:
    """Why a quick page's intervals can span orders of magnitude (R2's block size printed
    "6.5 [1.1e-07, 380,000,000]×" on a quiet machine): the reason beside the surprising number."""
    if fam.intervals == 0:
        return ""
    q = LookDesign.for_study(QUICK_REPETITIONS, QUICK_REPETITIONS).quantile(QUICK_REPETITIONS, fam.intervals)
    return (f" With {QUICK_REPETITIONS} repetitions, and each interval one of the {fam.intervals} held together "
            f"(above), an interval's ends lie {q:.0f} standard errors from its estimate (on the log scale for rates "
            "and times): three values that spread by tens of percent give an interval spanning orders of "
            "magnitude. Such an interval straddles almost any band, so its verdict is undecided; the full run's "
            "repetitions decide it.")


def family_words(fam: PageFamily) -> str:
    """The page's error control, in one sentence (shown on the page and in the summary)."""
    if fam.intervals == 0:
        return (f"No interval stands behind the {fam.verdicts} testable verdicts yet (nothing was measured): none "
                "holds or differs, so this page claims nothing.")
    return (f"The {fam.verdicts} testable verdicts are one family: the {fam.intervals} intervals behind them are "
            f"each computed at 1/{fam.intervals} of their design's tail (Bonferroni), so the chance that any "
            f"holds or differs on this page is wrong is at most {fam.alpha:.0%}; undecided and not testable "
            "verdicts claim nothing.")


def _time_of(times: dict[str, float], config_id: str) -> float:
    return times.get(config_id, 0.0)


def _budget_tag(row: Mapping[str, Any] | None) -> Tag | str:
    if row is None:
        return "–"
    return Tag(row["status"], spend.STATUS_TONES.get(row["status"], "neutral"))


def budget_section(budget: Mapping[str, Any]) -> Section:
    """Which claims the budget decided and which it left open (with what it would take), and how the
    budget was shared among the studies."""
    rows = [r for r in budget.get("verdicts") or [] if r["status"] != spend.NOT_TESTABLE]
    decided = [r for r in rows if r["status"] == spend.DECIDED]
    left = [r for r in rows if r["status"] != spend.DECIDED]
    tone: Any = "warn" if budget.get("exhausted") else "info"
    blocks: list[Note | Table] = [Note(spend.summary_words(budget, rows), tone)]
    if budget.get("plan"):
        blocks.append(Note(str(budget["plan"]), "info"))
    if decided:
        blocks.append(Table("Decided within the budget", ["claim", "study", "verdict"],
                            [[r["id"], r["study"], r["verdict"]] for r in decided]))
    if left:
        blocks.append(Table("Left open", ["claim", "study", "under the budget", "what it would take"],
                            [[r["id"], r["study"], _budget_tag(r), r["words"]] for r in left]))
    studies = budget.get("studies") or {}
    if studies:
        blocks.append(Table("The budget per study", ["study", "budget", "spent", "ran out"],
                            [[name, spend.fmt_seconds(v.get("seconds")), spend.fmt_seconds(v.get("spent_s")),
                              ("yes" if v.get("exhausted") else "no")
                              + ("" if v.get("reached", True) else " (before its first trial)")]
                             for name, v in studies.items()]))
    intro = ("Each study first ran every configuration to its minimum, then spent further repetitions on its claims "
             "still undecided that more repetitions would likely decide (the most decisions per second first), "
             "then on intervals wider than its target, never starting a round the measured trial times said could "
             "not finish. ")
    if budget.get("per_study"):
        intro += "Each quick study had its own budget."
    elif budget.get("plan"):  # too little for every minimum (reproduce/session.py): no intervals, cheapest claim first
        intro = ("The budget could not afford every study's minimum: each study it reached ran its minimum, then "
                 "repetitions on its claims still undecided that more repetitions would likely decide, never starting "
                 "a round the measured trial times said could not finish; how it was shared is below.")
    else:
        intro += ("The reproduction's budget was shared among the studies in turn, in proportion to what each needs; "
                  "what one left unspent went to the next.")
    return Section("The time budget", blocks, intro=intro)


def _link(child: ChildRun, base: str | None) -> Link | None:
    path, run_id = child.report, child.run_id
    if not path or not run_id:
        return None
    href = os.path.relpath(path, base) if base else path
    return Link(run_id, href)

"""The reproduction's page: every published claim, this machine's value, the verdict and why.

findings(), analyze() and present() follow the study interface (analysis pure, on a results document):
the document of a reproduction carries its child studies' documents under "children"
(see report/document.py), so the page is recomputed from stored runs and tested on fixtures.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping

from iolab.analysis.findings import Findings
from iolab.analysis.record import JSONObject, Record
from iolab.analysis.trials import Doc
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
    return PageFindings(quick=quick, claims=rows, counts={v: counts.get(v, 0) for v in VERDICT_ORDER},
                        family=claims.family_of(rows),
                        studies={name: ChildRun(**{k: v for k, v in c.items() if k != "doc"})
                                 for name, c in (doc.get("children") or {}).items()})


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
    base = doc.get("report_dir")
    sections = []
    for ref, title, study in REFERENCES:
        rows = [r for r in f.claims if r.reference == ref]
        if not rows:
            continue
        child = f.studies.get(study) or ChildRun()
        link = _link(child, base)
        table = Table("Published claims and this machine", ["claim", "this machine", "verdict", "why",
                                                            "rule"],
                      [[r.claim, r.value, Tag(r.verdict, TONES[r.verdict]), r.reason, r.rule] for r in rows])
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
    sections.insert(0, Section("How the verdicts are decided", [Note(family_words(fam), "info")], intro=(
        "holds: every interval the claim reads lies inside its band (or beyond its threshold; for a claim of "
        "equality, an equivalence test); differs: an interval lies wholly outside it; undecided: an interval "
        "straddles an edge, and the reason says how many more repetitions would likely decide it; not testable "
        "here: this machine or this run cannot answer it. An interval that merely touches a band decides "
        "nothing (docs/reproduce.md).")))
    if f.quick:
        sections.insert(0, Section("Quick reproduction", [Note(
            "This is `iolab reproduce --quick`: reduced matrices, so claims that need the full matrix (more groups, "
            "the application beside the groups, every record size) are 'not testable here'. Run `iolab reproduce` "
            "for all of them.", "warn")]))
    return summary, sections


def family_words(fam: PageFamily) -> str:
    """The page's error control, in one sentence (shown on the page and in the summary)."""
    return (f"The {fam.verdicts} testable verdicts are one family: the {fam.intervals} intervals behind them are "
            f"each computed at 1/{fam.intervals} of their design's tail (Bonferroni), so the chance that any "
            f"holds or differs on this page is wrong is at most {fam.alpha:.0%}; undecided and not testable "
            "verdicts claim nothing.")


def _link(child: ChildRun, base: str | None) -> Link | None:
    path, run_id = child.report, child.run_id
    if not path or not run_id:
        return None
    href = os.path.relpath(path, base) if base else path
    return Link(run_id, href)

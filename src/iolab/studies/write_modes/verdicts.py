"""write-modes' verdicts, as a repetition budget reads them: the cross-check rows (iolab's helper
agrees with fio within ±25 %, crosscheck.py), each with the configurations that would decide it
when it is undecided. Pure, on the results document."""

from __future__ import annotations

from iolab.analysis.sequential import RunEstimator
from iolab.analysis.trials import Doc
from iolab.analysis.verdicts import ReportedVerdict
from iolab.studies.common import ok_trials
from iolab.studies.write_modes.crosscheck import TOLERANCE, crosscheck


def study_verdicts(doc: Doc) -> list[ReportedVerdict]:
    trials = ok_trials(doc)
    helper = [t for t in trials if t["params"].get("_workload", {}).get("kind") == "writemode"]
    return [ReportedVerdict(f"cross-check {r.mode} bs={r.bs}",
                            f"the helper's {r.mode} writes of {r.bs} B agree with fio's within ±{TOLERANCE:.0%}",
                            r.verdict, r.decide)
            for r in crosscheck(trials, helper, RunEstimator(doc))]

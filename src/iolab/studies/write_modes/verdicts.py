"""write-modes' verdicts, as a repetition budget reads them: the cross-check rows (iolab's helper
agrees with fio within ±25 %, crosscheck.py), each with the configurations that would decide it
when it is undecided. Pure, on the results document."""

from __future__ import annotations

from typing import Any

from iolab.analysis.sequential import RunEstimator
from iolab.analysis.verdicts import Decision, ReportedVerdict
from iolab.studies.common import ok_trials
from iolab.studies.write_modes.crosscheck import TOLERANCE, crosscheck


def study_verdicts(doc: dict[str, Any]) -> list[ReportedVerdict]:
    trials = ok_trials(doc)
    helper = [t for t in trials if t["params"].get("_workload", {}).get("kind") == "writemode"]
    return [ReportedVerdict(f"cross-check {r['mode']} bs={r['bs']}",
                            f"the helper's {r['mode']} writes of {r['bs']} B agree with fio's within ±{TOLERANCE:.0%}",
                            r["verdict"], Decision.from_dict(r.get("decide")))
            for r in crosscheck(trials, helper, RunEstimator(doc))]

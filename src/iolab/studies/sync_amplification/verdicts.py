"""sync-amplification's verdicts, as a repetition budget reads them: R3's cost class per
application against each configuration without the ordering syncs (cost.py), each with the
configurations that would decide it when it is undecided. Pure, on the results document."""

from __future__ import annotations

from iolab.analysis.trials import Doc
from iolab.analysis.verdicts import ReportedVerdict
from iolab.studies.sync_amplification.cost import LARGE, verdict_rows


def _tcg(doc: Doc) -> bool:
    return any(((t.get("manifest") or {}).get("target") or {}).get("accel") == "tcg" for t in doc.get("trials") or [])


def study_verdicts(doc: Doc) -> list[ReportedVerdict]:
    out = []
    for r in verdict_rows(doc, _tcg(doc)):
        size = (f"a gain of at least {LARGE - 1:.0%}" if r.claim == "large"
                else f"a change within a factor {LARGE:g}")
        out.append(ReportedVerdict(f"cost {r.app} on {r.configuration}",
                                   f"{r.r3_name} on {r.configuration} against default qcow2: {size}, as R3",
                                   r.verdict, r.decide))
    return out

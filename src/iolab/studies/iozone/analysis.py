"""iozone's analysis (pure): KB/s per system, test and record, the median over repetitions
(virtio reuses `kbps_findings` for its guests)."""

from __future__ import annotations

from typing import Any

from iolab.analysis.sequential import RunEstimator
from iolab.studies.common import group_resolution, group_values, nested, ok_trials, size_label


def system_of(trial: dict[str, Any]) -> str:
    """host, or the guest's disk bus for trials that ran in a VM."""
    t = trial["params"].get("_target", {})
    return "host" if t.get("kind") in ("loop", "host", "device") else str(t.get("bus", t.get("kind")))


def kbps_findings(doc: dict[str, Any]) -> dict[str, Any]:
    trials = ok_trials(doc)
    for t in trials:
        w = t["params"]["_workload"]
        t["params"].update(system=system_of(t), test=w["test"], record=size_label(w["record"]).lower())
    # the median (the rate of the median time for the fixed data), with the interval adaptive stopping calls for
    # and widened by fio's millisecond clock where a pass was short (docs/statistics.md, "Resolution")
    keys = ["system", "test", "record"]
    return nested(group_values(trials, keys, "kbps"), RunEstimator(doc).harmonic, unit="KB/s",
                  rels=group_resolution(trials, keys, "kbps"))


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    return {"kbps": kbps_findings(doc)}

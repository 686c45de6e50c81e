"""iozone's analysis (pure): KB/s per system, test and record, the median over repetitions
(virtio reuses `kbps_findings` for its guests)."""

from __future__ import annotations

from iolab.analysis.findings import Findings
from iolab.analysis.record import Est, JSONObject
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import Doc, Trial
from iolab.studies.common import estimates, group_resolution, group_values, nest3, ok_trials, size_label

# {system: {test: {record: estimate}}}: "host" or a guest's disk bus, iozone's test, "4k"/"4m"/...
Kbps = dict[str, dict[str, dict[str, Estimate]]]


class IozoneFindings(Findings):
    """docs/results.md, iozone."""

    kbps: dict[str, dict[str, dict[str, Est]]]


def system_of(trial: Trial) -> str:
    """host, or the guest's disk bus for trials that ran in a VM."""
    t = trial["params"].get("_target", {})
    return "host" if t.get("kind") in ("loop", "host", "device") else str(t.get("bus", t.get("kind")))


def kbps_findings(doc: Doc) -> Kbps:
    trials = ok_trials(doc)
    for t in trials:
        w = t["params"]["_workload"]
        t["params"].update(system=system_of(t), test=w["test"], record=size_label(w["record"]).lower())
    # the median (the rate of the median time for the fixed data), with the interval adaptive stopping calls for
    # and widened by fio's millisecond clock where a pass was short (docs/statistics.md, "Resolution")
    keys = ["system", "test", "record"]
    return nest3(estimates(group_values(trials, keys, "kbps"), RunEstimator(doc).harmonic, unit="KB/s",
                           rels=group_resolution(trials, keys, "kbps")))


def findings(doc: Doc) -> IozoneFindings:
    return IozoneFindings(kbps=kbps_findings(doc))


def analyze(doc: Doc) -> JSONObject:
    """The findings as the results document holds them (docs/results.md)."""
    return findings(doc).to_json()

"""virtio's analysis (pure): iozone's KB/s per system, every guest cell over the host cell of
the same run (the ratio of the two medians with its interval), and the layers of the virtual disk from the device up
(layers.py: what each costs over the one below, which rows hold under TCG)."""

from __future__ import annotations

from iolab.analysis.findings import Findings
from iolab.analysis.record import Est, JSONObject
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import Estimate
from iolab.analysis.trials import Doc
from iolab.studies.common import Key, group_resolution, group_values, nest3, ok_trials
from iolab.studies.iozone import analysis as iozone
from iolab.studies.virtio.layers import Layers, layer_findings


class VirtioFindings(Findings):
    """docs/results.md, virtio."""

    accel: str | None
    kbps: dict[str, dict[str, dict[str, Est]]]            # as iozone's: system, test, record
    ratio_vs_host: dict[str, dict[str, dict[str, Est]]]   # guest system, test, record: guest / host
    layers: Layers


def accel_of(doc: Doc) -> str | None:
    for t in doc["trials"]:
        accel = (t.get("manifest") or {}).get("target", {}).get("accel")
        if accel:
            return str(accel)
    return None


def findings(doc: Doc) -> VirtioFindings:
    accel = accel_of(doc)
    layers = layer_findings(doc, accel)  # before iozone's part relabels the iozone trials' params
    iozone_doc = dict(doc, trials=[t for t in doc["trials"] if t["params"]["_workload"].get("kind") == "iozone"])
    kbps = iozone.kbps_findings(iozone_doc)
    trials = ok_trials(iozone_doc)
    values = group_values(trials, ["system", "test", "record"], "kbps")
    rels = group_resolution(trials, ["system", "test", "record"], "kbps")
    est = RunEstimator(doc)  # ratios of two adaptively stopped means, widened as each is
    ratios: dict[Key, Estimate] = {}
    for (system, test, record), vals in values.items():
        host = values.get(("host", test, record))
        if system == "host" or not host:
            continue
        # the ratio of the medians the kbps table shows
        ratios[system, test, record] = est.ratio_of("harmonic", vals, host, (rels[system, test, record],
                                                                              rels["host", test, record]))
    return VirtioFindings(accel=accel, kbps=kbps, ratio_vs_host=nest3(ratios), layers=layers)


def analyze(doc: Doc) -> JSONObject:
    """The findings as the results document holds them (docs/results.md)."""
    return findings(doc).to_json()

"""virtio's analysis (pure): iozone's KB/s per system, every guest cell over the host cell of
the same run (the ratio of the two medians with its interval), and the layers of the virtual disk from the device up
(layers.py: what each costs over the one below, which rows hold under TCG)."""

from __future__ import annotations

from typing import Any

from iolab.analysis.sequential import RunEstimator
from iolab.studies.common import group_resolution, group_values, ok_trials
from iolab.studies.iozone import analysis as iozone
from iolab.studies.virtio.layers import layer_findings


def accel_of(doc: dict[str, Any]) -> str | None:
    for t in doc["trials"]:
        accel = (t.get("manifest") or {}).get("target", {}).get("accel")
        if accel:
            return accel
    return None


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    accel = accel_of(doc)
    layers = layer_findings(doc, accel)  # before iozone's part relabels the iozone trials' params
    iozone_doc = dict(doc, trials=[t for t in doc["trials"] if t["params"]["_workload"].get("kind") == "iozone"])
    kbps = iozone.kbps_findings(iozone_doc)
    trials = ok_trials(iozone_doc)
    values = group_values(trials, ["system", "test", "record"], "kbps")
    rels = group_resolution(trials, ["system", "test", "record"], "kbps")
    est = RunEstimator(doc)  # ratios of two adaptively stopped means, widened as each is
    ratios: dict[str, Any] = {}
    for (system, test, record), vals in values.items():
        host = values.get(("host", test, record))
        if system == "host" or not host:
            continue
        # the ratio of the medians the kbps table shows
        r = est.ratio_of("harmonic", vals, host, (rels[system, test, record], rels["host", test, record]))
        ratios.setdefault(system, {}).setdefault(test, {})[record] = r.as_dict()
    return {"accel": accel, "kbps": kbps, "ratio_vs_host": ratios, "layers": layers}

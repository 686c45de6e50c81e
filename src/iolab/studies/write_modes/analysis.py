"""write-modes' analysis (pure, on the results document): throughput and call rate per mode and
block size, the knee of each mode, the flags where a mode did not take effect, and the
cross-check against fio (crosscheck.py)."""

from __future__ import annotations

from typing import Any

from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import knee
from iolab.studies.common import flags_by, group_values, nested, ok_trials
from iolab.studies.write_modes.crosscheck import crosscheck

KNEE_FRACTION = 0.9


def analyze(doc: dict[str, Any]) -> dict[str, Any]:
    trials = ok_trials(doc)
    helper = [t for t in trials if t["params"].get("_workload", {}).get("kind") == "writemode"]
    for t in helper:
        t["params"]["mode"] = t["params"]["_workload"]["mode"]
        t["params"]["bs"] = t["params"]["_workload"]["bs"]
    thr = group_values(helper, ["mode", "bs"], "throughput_mib_s")
    sps = group_values(helper, ["mode", "bs"], "syscalls_per_s")
    est = RunEstimator(doc)  # the interval adaptive stopping calls for (analysis/sequential.py)
    throughput = nested(thr, est.harmonic, "MiB/s")  # rates over a fixed amount of data
    knees = {}
    for mode, per_bs in throughput.items():
        xs = [int(b) for b in per_bs]
        knees[mode] = knee(xs, [per_bs[str(b)]["mean"] for b in xs], KNEE_FRACTION)
    flags = {f"{m}/{b}": f for (m, b), f in flags_by(helper, ["mode", "bs"]).items()}
    return {
        "throughput": throughput,
        "syscalls_per_s": nested(sps, est.harmonic, "calls/s"),
        "knee": knees,
        "knee_fraction": KNEE_FRACTION,
        "mode_flags": flags,
        "fio_crosscheck": crosscheck(trials, helper, est),
    }

"""write-modes' analysis (pure, on the results document): throughput and call rate per mode and
block size, the knee of each mode, the flags where a mode did not take effect, and the
cross-check against fio (crosscheck.py)."""

from __future__ import annotations

from iolab.analysis.findings import Findings
from iolab.analysis.record import Est, JSONObject
from iolab.analysis.sequential import RunEstimator
from iolab.analysis.stats import knee
from iolab.analysis.trials import Doc
from iolab.studies.common import estimates, flags_by, group_values, nest2, ok_trials
from iolab.studies.write_modes.crosscheck import CrossCheck, crosscheck

KNEE_FRACTION = 0.9


class WriteModesFindings(Findings):
    """docs/results.md, write-modes: per mode and block size (bytes, as a string key)."""

    throughput: dict[str, dict[str, Est]]       # MiB/s
    syscalls_per_s: dict[str, dict[str, Est]]   # calls/s
    knee: dict[str, int | None]                 # per mode: the smallest block size at KNEE_FRACTION of its best
    knee_fraction: float
    mode_flags: dict[str, list[str]]            # "mode/bs": the flags its trials raised
    fio_crosscheck: list[CrossCheck]


def findings(doc: Doc) -> WriteModesFindings:
    trials = ok_trials(doc)
    helper = [t for t in trials if t["params"].get("_workload", {}).get("kind") == "writemode"]
    for t in helper:
        t["params"]["mode"] = t["params"]["_workload"]["mode"]
        t["params"]["bs"] = t["params"]["_workload"]["bs"]
    thr = group_values(helper, ["mode", "bs"], "throughput_mib_s")
    sps = group_values(helper, ["mode", "bs"], "syscalls_per_s")
    est = RunEstimator(doc)  # the interval adaptive stopping calls for (analysis/sequential.py)
    throughput = nest2(estimates(thr, est.harmonic, "MiB/s"))  # rates over a fixed amount of data
    knees: dict[str, int | None] = {}
    for mode, per_bs in throughput.items():
        xs = [int(b) for b in per_bs]
        k = knee(xs, [per_bs[str(b)].mean for b in xs], KNEE_FRACTION)  # a NaN (no estimate) is left out
        knees[mode] = None if k is None else int(k)
    flags = {f"{m}/{b}": f for (m, b), f in flags_by(helper, ["mode", "bs"]).items()}
    return WriteModesFindings(
        throughput=throughput, syscalls_per_s=nest2(estimates(sps, est.harmonic, "calls/s")), knee=knees,
        knee_fraction=KNEE_FRACTION, mode_flags=flags, fio_crosscheck=crosscheck(trials, helper, est))


def analyze(doc: Doc) -> JSONObject:
    """The findings as the results document holds them (docs/results.md)."""
    return findings(doc).to_json()

"""`iolab compare` across days, simulated: how often A/A compares claim a change, and how often
a real change is found, when whole runs move (run-level shifts) as well as repetitions.

Every compare is the real `iolab.analysis.compare.compare_runs` on results documents of the
shape `iolab report --format json` gives; repetitions per configuration are decided by the
runner's own `StopRule` (3..10, ±5 %), as in a default study. A study has CONFIGS fio-like
configurations (IOPS, MiB/s, mean latency and p99 from one draw, as fio's are); each run shifts
every configuration's level by exp(u) with u ~ N(0, tau^2), half of it common to the run
(the machine's day) and half its own (the image's place on disk). The store holds
`baselines` earlier runs of the same setup; A is the newest of them and B a new run.

    bench/run compare-noise [--compares 1000] [--seed 1]

prints one line per cell: `compare-noise cell=<...> claims=<x>% [lo, hi] n=<compares>` (Wilson
95 % interval), and the interval coverage of B/A. tests/analysis/test_compare_two_levels.py runs
the same cells with fewer compares.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from iolab.analysis.compare import compare_runs
from iolab.analysis.plan import StopRule
from iolab.core.model import config_id

CONFIGS = 8
WITHIN_CV = 0.01
STOP = StopRule(3, 10, 0.05)
ENV = {"hostname": "lab", "kernel": "6.1.0", "cpu_model": "cpu", "fio_version": "fio-3.33",
       "qemu_version": "QEMU 7.2", "iolab_version": "0.1.0"}


@dataclass(frozen=True)
class Cell:
    name: str
    tau: float  # run-level SD (log scale)
    baselines: int  # runs of A's setup in the store, A included (1: A alone, nothing stored)
    change: float = 1.0  # B's true level / A's
    changed: str = "all"  # "all" configurations, or "one" (the first)
    common: float = 0.5  # share of the run-level variance common to every configuration of a run


def _workload(i: int) -> dict[str, Any]:
    return {"kind": "fio", "rw": "randread", "bs": 4096 * (i + 1), "iodepth": 1, "runtime": 1.0}


def _trial_metrics(rng: np.random.Generator, iops: float, bs: int) -> dict[str, float]:
    x = iops * math.exp(WITHIN_CV * rng.standard_normal())
    lat = 1e6 / x
    return {"iops": x, "bw_mib_s": x * bs / 2**20, "read_lat_mean_us": lat,
            "read_clat_p99_us": 3 * lat * math.exp(WITHIN_CV * rng.standard_normal())}


def run_doc(run_id: str, created: float, levels: np.ndarray, rng: np.random.Generator) -> dict[str, Any]:
    """One run: configuration i at true IOPS levels[i], repetitions until the runner's StopRule is met."""
    trials = []
    target = {"kind": "loop", "size": 64 << 20}
    for i, level in enumerate(levels):
        w = _workload(i)
        cid = config_id(target, w)
        values: list[dict[str, float]] = []
        while STOP.wants_more([v["iops"] for v in values]):
            values.append(_trial_metrics(rng, float(level), w["bs"]))
        for r, m in enumerate(values):
            trials.append({"id": f"{cid}-r{r}", "params": {"cell": f"c{i}", "_target": target, "_workload": w},
                           "repetition": r, "status": "ok", "error": None, "metrics": m, "probes": {}, "flags": [],
                           "manifest": {}, "started": created, "ended": created + 1})
    return {"run_id": run_id, "study": "sim", "status": "complete", "created": created, "source": "sim",
            "spec": {"study": {"name": "sim", "repetitions": 3, "max_repetitions": 10}}, "options": {},
            "environment": dict(ENV), "extra": {}, "trials": trials, "findings": {}}


def shifts(rng: np.random.Generator, tau: float, common: float = 0.5) -> np.ndarray:
    """One run's level factors: `common` of the variance shared by the run's configurations, the
    rest each configuration's own."""
    day = rng.standard_normal()
    own = rng.standard_normal(CONFIGS)
    return np.exp(tau * (math.sqrt(common) * day + math.sqrt(1 - common) * own))


def one_compare(cell: Cell, rng: np.random.Generator) -> dict[str, Any]:
    base = 1000.0 * (1 + np.arange(CONFIGS))
    history = [run_doc(f"base{k}", 1000.0 + k, base * shifts(rng, cell.tau, cell.common), rng)
               for k in range(cell.baselines)]
    a = history[-1]
    true_b = base.copy()
    if cell.changed == "all":
        true_b *= cell.change
    else:
        true_b[0] *= cell.change
    b = run_doc("B", 2000.0, true_b * shifts(rng, cell.tau, cell.common), rng)
    return compare_runs(a, b, history=history[:-1])


def outcome(cell: Cell, res: dict[str, Any]) -> tuple[bool, bool, int, int]:
    """(any row claims a change, the changed rows are found with the right sign, rows whose interval
    covers the truth, rows with an interval)."""
    claims = [r for r in res["rows"] if r["verdict"] in ("improvement", "regression")]
    changed_cfg = {"c0"} if cell.changed == "one" else {f"c{i}" for i in range(CONFIGS)}
    want = "regression" if cell.change < 1 else "improvement"  # iops and bandwidth: higher is better
    found = any(r["verdict"] == want and r["metric"] == "iops" and r["config"][5:] in changed_cfg for r in claims)
    covered = total = 0
    for r in res["rows"]:
        lo, hi = r["ratio_ci95"]
        if lo is None or hi is None:
            continue
        changed = r["config"][5:] in changed_cfg and cell.change != 1.0
        truth = 1.0 if not changed else (cell.change if r["metric"] in ("iops", "bw_mib_s") else 1 / cell.change)
        total += 1
        covered += lo <= truth <= hi
    return bool(claims), found, covered, total


CELLS = [Cell(f"A/A tau={t:.0%} {label}", t, k) for t in (0.01, 0.02, 0.03)
         for k, label in ((1, "two runs only (floor)"), (5, "5 stored baselines"))] + [
    Cell("10% slower, tau=2%, 5 stored baselines, every configuration", 0.02, 5, 0.9, "all"),
    Cell("10% slower, tau=2%, 5 stored baselines, one configuration of 8", 0.02, 5, 0.9, "one"),
    Cell("10% slower, tau=2%, two runs only (floor)", 0.02, 1, 0.9, "all"),
]
# held out: the run-level shift wholly common to a run's configurations, or wholly their own
HELD_OUT = [Cell(f"A/A tau=3% 5 stored baselines, {label}", 0.03, 5, common=c)
            for c, label in ((1.0, "every configuration moves together"), (0.0, "configurations move alone"))] + [
    Cell("A/A tau=3% 10 stored baselines", 0.03, 10),
    Cell("10% slower, tau=2%, 5 stored baselines, every configuration, moving together", 0.02, 5, 0.9, common=1.0),
]


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    z, p = 1.96, k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, c - h), min(1.0, c + h)


def simulate(cell: Cell, compares: int, seed: int) -> Iterator[tuple[bool, bool, int, int]]:
    rng = np.random.default_rng([seed, int(cell.tau * 1000), cell.baselines, int(cell.change * 100),
                                 cell.changed == "one", int(cell.common * 10)])
    for _ in range(compares):
        yield outcome(cell, one_compare(cell, rng))


def summary(cell: Cell, compares: int, seed: int) -> dict[str, Any]:
    claims = found = covered = total = 0
    for c, f, cov, tot in simulate(cell, compares, seed):
        claims += c
        found += f
        covered += cov
        total += tot
    return {"cell": cell.name, "n": compares, "claims": claims / compares, "claims_ci": wilson(claims, compares),
            "found": found / compares, "found_ci": wilson(found, compares),
            "coverage": covered / total if total else math.nan}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--compares", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    for cell in CELLS + HELD_OUT:
        s = summary(cell, args.compares, args.seed)
        lo, hi = s["found_ci"] if cell.change != 1.0 else s["claims_ci"]
        what = "found" if cell.change != 1.0 else "claims"
        print(f"compare-noise cell={cell.name!r} {what}={s[what]:.1%} [{lo:.1%}, {hi:.1%}] "
              f"coverage={s['coverage']:.1%} n={s['n']}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()

"""iolab's change points against Apache Otava's, on the same series.

Apache Otava (apache-otava on PyPI; E-divisive means with a t-test, Fleming et al. 2023) is run
with its defaults (window 50, max p-value 0.001, no minimum magnitude) through its own
`compute_change_points`, one series at a time, as its CLI does. It pins numpy 2.2.0 and scipy
1.16, which conflict with iolab's pins, so it lives in a virtual environment of its own
($IOLAB_CACHE or ~/.cache/iolab, `apache-otava==0.8.0`, installed on first use from PyPI) and is
driven through a small JSON protocol: series in on stdin, change point indices out.

The series are bench/sim_history.py's (families of 30 configurations, CV 1 %): flat independent,
flat AR(1) rho = 0.5, and a 5 % step after 17 runs judged after 1..10 more runs; plus the
series stored by `bench/run run-to-run` (--store PATH), judged by both.

    bench/run otava [--families 200] [--store /tmp/iolab-run-to-run-*.sqlite]

Lines: `otava cell=<...> iolab=<x>% otava=<y>% n=<families>`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import sim_history as sh  # noqa: E402  (bench/ is not a package)

OTAVA = "apache-otava==0.8.0"
DRIVER = r"""
import json, sys
from otava.analysis import compute_change_points
out = []
for series in json.load(sys.stdin):
    cps, _ = compute_change_points(series, window_len=50, max_pvalue=0.001, min_magnitude=0.0)
    out.append([int(c.index) for c in cps])
json.dump(out, sys.stdout)
"""


def otava_python() -> Path:
    cache = Path(os.environ.get("IOLAB_CACHE", Path.home() / ".cache" / "iolab"))
    venv = cache / "otava-venv"
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"installing {OTAVA} into {venv} (its pins conflict with iolab's: a venv of its own)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", OTAVA], check=True)
    return py


def otava(py: Path, series: list[list[float]]) -> list[list[int]]:
    r = subprocess.run([str(py), "-c", DRIVER], input=json.dumps(series), capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def flat_alarms(py: Path, nz: sh.Noise, families: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng([seed, int(nz.rho * 10), 99])
    fams = [sh.family(rng, 20, nz) for _ in range(families)]
    ours = sum(any(r.changes for r in sh.judge(x).values()) for x in fams) / families
    found = otava(py, [list(map(float, s)) for x in fams for s in x])
    theirs = sum(any(found[i * sh.CONFIGS + k] for k in range(sh.CONFIGS)) for i in range(families)) / families
    return ours, theirs


def step_delays(py: Path, families: int, seed: int) -> dict[str, list[float]]:
    """Runs after a 5 % step (CV 1 %, independent) until each method reports a change at it, and
    whether a second change shows in the stepped series at the end (10 runs after)."""
    rng = np.random.default_rng([seed, 5])
    nz = sh.Noise("independent", 0.01)
    ours: list[float] = []
    theirs: list[float] = []
    second = {"iolab": 0, "otava": 0}
    for _ in range(families):
        x = sh.family(rng, sh.BEFORE + sh.AFTER, nz, -0.05)
        mine = theirs_r = None
        prefixes = [list(map(float, x[0, : sh.BEFORE + r])) for r in range(1, sh.AFTER + 1)]
        found = otava(py, prefixes)
        for r in range(1, sh.AFTER + 1):
            if theirs_r is None and any(abs(c - sh.BEFORE) <= 1 for c in found[r - 1]):
                theirs_r = r
            if mine is None:
                res = sh.judge(x[:, : sh.BEFORE + r])
                if any(abs(c.index - sh.BEFORE) <= 1 for c in res[0].changes):
                    mine = r
        ours.append(mine or sh.AFTER + 1)
        theirs.append(theirs_r or sh.AFTER + 1)
        second["otava"] += len(found[-1]) > 1
        second["iolab"] += len(sh.judge(x)[0].changes) > 1
    return {"iolab": ours, "otava": theirs, "second_iolab": [second["iolab"] / families],
            "second_otava": [second["otava"] / families]}


def stored(py: Path, path: Path) -> None:
    from iolab.analysis import changepoints as cp
    from iolab.analysis.history import RunData, build
    from iolab.store import registry

    s = registry.open_existing(str(path), "--store")
    if s is None:
        print(f"otava: no store at {path}")
        return
    runs = [RunData(r.id, r.created, r.environment, s.trials(r.id), r.options) for r in s.runs(1000)]
    hist = build(runs)
    found = otava(py, [[p.value for p in ser.points] for ser in hist.series])
    for ser, theirs in zip(hist.series, found, strict=True):
        mine = [f"{c.status} {c.index}" for c in ser.changes]
        print(f"otava stored series={ser.label}:{ser.metric} runs={len(ser.points)} iolab={mine} otava={theirs}")
    print(f"otava stored rho={hist.rho} (iolab's AR(1) model of this store; {cp.ALPHA:.0%} family-wise)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--store", type=Path, default=None, help="also judge the series of this store (run-to-run's)")
    args = ap.parse_args()
    py = otava_python()
    for nz in (sh.Noise("independent", 0.01), sh.Noise("AR(1) rho 0.5", 0.01, 0.5)):
        ours, theirs = flat_alarms(py, nz, args.families, args.seed)
        print(f"otava cell='flat {nz.name}, 20 runs, 30 configurations: any false alarm' iolab={ours:.1%} "
              f"otava={theirs:.1%} n={args.families}", flush=True)
    d = step_delays(py, args.families, args.seed)
    for who in ("iolab", "otava"):
        runs = sorted(d[who])
        within = {k: sum(r <= k for r in runs) / len(runs) for k in (1, 2, 3, 5)}
        print(f"otava cell='5 % step at CV 1 %: runs until reported' method={who} median={runs[len(runs) // 2]} "
              + " ".join(f"within_{k}={v:.0%}" for k, v in within.items())
              + f" second_change={d['second_' + who][0]:.1%} n={len(runs)}", flush=True)
    if args.store:
        stored(py, args.store)


if __name__ == "__main__":
    main()

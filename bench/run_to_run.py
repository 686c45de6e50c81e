"""Run-to-run spread on this machine: the same small study run again and again, each run a
fresh level (new iolab process, new loop device, new fio and sysbench processes), spaced
apart in time, into a private results store. What `iolab compare` uses as its default floor
when the store holds no repeated runs of a configuration (docs/statistics.md, "Two levels of
noise").

    bench/run run-to-run [--runs 12] [--gap 240] [--db PATH] [--analyse-only]

Measures: per configuration and metric, the spread of the run means (log scale) beyond what
the trials inside each run explain: tau = sqrt(max(S^2 - mean(s_r^2 / n_r), 0)), S^2 the
variance of the k run means (analysis/runlevel.py, the estimator compare uses). Last lines:
`run-to-run tau=<x>% config=<label> metric=<name> k=<runs>` and the median over rows.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = """
[study]
name = "run-to-run"
repetitions = 3
max_repetitions = 3

[[targets]]
name = "loop"
kind = "loop"
size = "256M"

[[targets]]
name = "host"
kind = "host"

[[workloads]]
name = "randread"
targets = ["loop"]
kind = "fio"
rw = "randread"
bs = "4k"
iodepth = 1
runtime = "2s"
direct = true

[[workloads]]
name = "seqwrite"
targets = ["loop"]
kind = "fio"
rw = "write"
bs = "1M"
iodepth = 4
runtime = "2s"
direct = true

[[workloads]]
name = "cpu"
targets = ["host"]
kind = "sysbench-cpu"
threads = 1
time = 2
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--gap", type=float, default=240.0, help="seconds between the starts of two runs")
    ap.add_argument("--db", type=Path, default=Path(tempfile.gettempdir()) / f"iolab-run-to-run-{os.getpid()}.sqlite")
    ap.add_argument("--analyse-only", action="store_true", help="only the figures of the runs already in --db")
    args = ap.parse_args()
    iolab = Path(sys.executable).with_name("iolab")
    if not args.analyse_only:
        with tempfile.TemporaryDirectory(prefix="iolab-run-to-run-") as tmp:
            spec = Path(tmp) / "spec.toml"
            spec.write_text(SPEC)
            for i in range(args.runs):
                t0 = time.monotonic()
                print(f"run {i + 1}/{args.runs} into {args.db}", flush=True)
                subprocess.run([str(iolab), "run", str(spec), "--db", str(args.db), "-o",
                                str(Path(tmp) / f"r{i}.html")], check=False)
                if i + 1 < args.runs:
                    time.sleep(max(0.0, args.gap - (time.monotonic() - t0)))
    analyse(args.db)


def analyse(db: Path) -> None:
    from iolab.analysis.runlevel import spread_of_runs
    from iolab.publish.document import results_document
    from iolab.store import registry

    store = registry.open_existing(str(db), "--db")
    if store is None:
        raise SystemExit(f"no store at {db}")
    docs = [results_document(store, r) for r in store.runs(1000) if r.study == "run-to-run"]
    rows = spread_of_runs(docs)
    taus = sorted(r["tau"] for r in rows if r["tau"] is not None)
    for r in rows:
        tau = "n/a" if r["tau"] is None else f"{r['tau']:.2%}"
        print(f"run-to-run tau={tau} config={r['config']} metric={r['metric']} k={r['runs']} "
              f"within={r['within']:.2%} between={r['between']:.2%}")
    if taus:
        print(f"run-to-run median tau={taus[len(taus) // 2]:.2%} upper quartile={taus[(3 * len(taus)) // 4]:.2%} "
              f"over {len(taus)} rows, {len(docs)} runs")


if __name__ == "__main__":
    main()

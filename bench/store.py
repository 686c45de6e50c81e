"""Trials written per second to the SQLite store and to a local PostgreSQL, side by side, and
what one write costs as a fraction of a 10 s trial (must stay below 1 %).

Each block writes --trials realistic trials (a fio-sized raw JSON of ~30 kB, a manifest,
probe data) through `Store.save_trial`, each its own durable transaction: SQLite with
synchronous=FULL on the data directory's disk, PostgreSQL started for the benchmark in a
temporary directory (tests/store/pgserver.py) with fsync on, over its unix socket. Blocks
repeat until the 95 % CI of the trials/s is within --target (at least 5 blocks). Prints one
line per backend: `store <backend> trials/s=<mean> [lo, hi] n=<blocks> cost=<x>% of a 10 s trial`.

Then what the team store's quota (schema version 4: a trigger that charges every row to its
login role) costs a write: two PostgreSQL databases of the same server, one with the charge
triggers disabled, written in alternating blocks (which goes first alternates too), until the
95 % CI of the ratio of their trials/s is within --target; last line:
`store quota ratio with/without=<r> [lo, hi] n=<pairs>`.

    bench/run store [--trials N] [--target 0.02] [--budget S] [--parts sqlite,postgresql,quota]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from figures import Busy, mean_figure, print_side_by_side, ratio_figure, stop_on_signals, stopping, until_narrow

from iolab.core.model import TrialResult
from iolab.store import registry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.store.pgserver import PgServer, missing_binaries  # noqa: E402  (the repo root, just added)

TRIAL_S = 10.0
RAW = {"jobs": [{"jobname": f"j{i}", "read": {"iops": 1000.0 + i, "clat_ns": {"percentile": {
    f"{p:.6f}": 1000 * i + p for p in (1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 99, 99.5, 99.9, 99.95, 99.99)}}},
    "write": {"iops": 0.0}, "job options": {"rw": "randread", "bs": "4k", "iodepth": "32"}} for i in range(40)]}


def _trial(i: int) -> TrialResult:
    return TrialResult(trial_id=f"c{i % 4}-r{i}", config_id=f"c{i % 4}", repetition=i // 4,
                       params={"bs": 4096, "iodepth": 32}, status="ok", error=None,
                       metrics={"iops": 1000.0 + i, "bw_bytes": 4e6, "lat_p99_us": 120.0},
                       probes={"diskstats": {"reads": i, "sectors": 8 * i}, "cpu": [0.1] * 50},
                       manifest={"target": {"kind": "loop", "queue": {"scheduler_active": "mq-deadline"}},
                                 "job": "[j]\nrw=randread\nbs=4k\n" * 20},
                       started=time.time(), ended=time.time() + TRIAL_S)


def measure(ref: str, name: str, trials: int, target: float, budget: float) -> None:
    store = registry.open_store(ref)
    rates: list[float] = []
    try:
        def block(b: int) -> None:
            run_id = f"bench-{name}-{b}"
            store.create_run(run_id, "bench", "bench", {}, {}, {})
            t0 = time.perf_counter()
            for i in range(trials):
                store.save_trial(run_id, _trial(i), RAW)
            rates.append(trials / (time.perf_counter() - t0))
            print(f"{name} block {b + 1}: {rates[-1]:.0f} trials/s", flush=True)

        fig = until_narrow(block, lambda: mean_figure(f"store {name} trials/s", rates, "", target, stopping(30)),
                           max_n=30, budget_s=budget)
    finally:
        store.close()
    cost = 1 / fig.value / TRIAL_S
    print(f"{fig.line()} cost={cost:.4%} of a {TRIAL_S:.0f} s trial ({'below' if cost < 0.01 else 'ABOVE'} 1 %)")


def quota_cost(server: PgServer, trials: int, target: float, budget: float) -> None:
    """Trials/s with the quota's charge triggers and without them, in alternating blocks, as one ratio."""
    with_quota, without = server.fresh_url(), server.fresh_url()
    stores = {"with": registry.open_store(with_quota), "without": registry.open_store(without)}
    with psycopg.connect(without, autocommit=True) as conn:  # the same schema, the charge left out
        conn.execute("ALTER TABLE iolab.runs DISABLE TRIGGER charge_run")
        conn.execute("ALTER TABLE iolab.trials DISABLE TRIGGER charge_trial")
    seconds: dict[str, list[float]] = {"with": [], "without": []}
    ratios: list[float] = []
    busy = Busy()
    try:
        def pair(b: int) -> None:
            for side in (("with", "without") if b % 2 == 0 else ("without", "with")):
                run_id = f"bench-quota-{side}-{b}"
                stores[side].create_run(run_id, "bench", "bench", {}, {}, {})
                busy.start()
                t0 = time.perf_counter()
                for i in range(trials):
                    stores[side].save_trial(run_id, _trial(i), RAW)
                seconds[side].append(time.perf_counter() - t0)  # the block of `trials` writes
                busy.stop()
            ratios.append(seconds["without"][-1] / seconds["with"][-1])  # trials/s with / without
            print(f"quota pair {b + 1}: with {trials / seconds['with'][-1]:.0f} trials/s, without "
                  f"{trials / seconds['without'][-1]:.0f} trials/s, ratio {ratios[-1]:.3f}", flush=True)

        looks = stopping(30)
        fig = until_narrow(pair, lambda: ratio_figure("store quota ratio with/without", ratios, target, looks),
                           max_n=30, budget_s=budget)
    finally:
        for st in stores.values():
            st.close()
    print_side_by_side("store quota", [(f"with the quota, {trials} trials", "block with", seconds["with"]),
                                       (f"without, {trials} trials", "block without", seconds["without"])],
                       fig, busy, looks)


def main() -> None:
    stop_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=200, help="trials per block (200)")
    ap.add_argument("--target", type=float, default=0.02, help="relative 95%% CI half-width to reach (0.02)")
    ap.add_argument("--budget", type=float, default=120, help="seconds per backend before giving up on the width")
    ap.add_argument("--parts", default="sqlite,postgresql,quota", help="which parts to run (comma-separated)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if "sqlite" in parts:
        with tempfile.TemporaryDirectory(prefix="iolab-bench-store-", dir="/var/tmp") as tmp:
            measure(str(Path(tmp) / "results.sqlite"), "sqlite", args.trials, args.target, args.budget)
    if not parts & {"postgresql", "quota"}:
        return
    if missing_binaries():
        print(f"store postgresql: not measured (no PostgreSQL server binaries: {', '.join(missing_binaries())})")
        return
    server = PgServer.create(fsync=True)
    try:
        if "postgresql" in parts:
            measure(server.fresh_url(), "postgresql", args.trials, args.target, args.budget)
        if "quota" in parts:
            quota_cost(server, args.trials, args.target, args.budget)
    finally:
        server.destroy()


if __name__ == "__main__":
    main()

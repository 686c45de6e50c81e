"""Setting up and tearing down weighted cgroups: 128 groups (mkdir, weight write and read back,
then removal) on a scratch loop device under BFQ, the way cgroup-weights' largest N does it.
Repeats until the 95 % CI of the mean is within ±2 % (at least 5, at most --max-rounds, within
--budget seconds) and prints last `cgroup-groups seconds=<mean> [lo, hi] s n=<rounds>` and the
ratio to the 10 s the setup may take (the acceptance of the cgroup layer; a test only checks
that it works, a benchmark how fast).

    bench/run cgroup-groups [--groups N] [--max-rounds N] [--target 0.02] [--budget S]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from figures import Busy, add_round_arguments, mean_figure, stop_on_signals, stopping, until_narrow

from iolab.cgroups.session import CgroupSession
from iolab.core.resources import Ledger

BUDGET_S = 10.0  # the setup of N = 128 groups may take at most this long
WEIGHTS = (100, 200, 400, 800)


def main() -> None:
    stop_on_signals()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=128, help="groups per round (default 128)")
    add_round_arguments(ap, max_rounds=30, target=0.02, budget=120, what="the figure")
    args = ap.parse_args()
    if args.max_rounds < 5 or not 1 <= args.groups <= 1024:
        ap.error("--max-rounds at least 5, --groups 1..1024")
    scratch = Path(tempfile.mkdtemp(prefix="iolab-bench-cg-", dir="/var/tmp"))
    os.environ["IOLAB_DATA"] = str(scratch / "data")  # the ledger of this benchmark, nobody else's
    image = scratch / "device.img"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    dev = subprocess.run(["losetup", "--find", "--show", str(image)], check=True, capture_output=True,
                         text=True).stdout.strip()
    ledger = Ledger()
    times: list[float] = []
    busy = Busy()

    def round_(i: int) -> None:
        busy.start()
        t0 = time.monotonic()
        session = CgroupSession("bfq", dev, ledger, runid=f"bench-{i}")
        groups = session.setup([WEIGHTS[k % 4] for k in range(args.groups)])
        t1 = time.monotonic()
        problems = session.teardown()
        t2 = time.monotonic()
        busy.stop()
        if len(groups) != args.groups or problems:
            raise SystemExit(f"round {i + 1}: {len(groups)} groups, teardown problems {problems}")
        times.append(t2 - t0)
        print(f"round {i + 1}: create+weight+readback {t1 - t0:.3f} s, remove {t2 - t1:.3f} s "
              f"(machine busy {busy.shares[-1]:.0%})", flush=True)

    try:
        fig = until_narrow(round_, lambda: mean_figure("cgroup-groups seconds", times, "s", args.target,
                                                       stopping(args.max_rounds)),
                           max_n=args.max_rounds, budget_s=args.budget)
    finally:
        subprocess.run(["losetup", "-d", dev], check=False)
        subprocess.run(["rm", "-rf", str(scratch)], check=False)
    why = f"the machine's CPUs were {busy.mean():.0%} busy on average"
    print(f"{args.groups} groups per round; {fig.verdict(why)}")
    if args.groups == 128:
        print(f"cgroup-groups budget ratio={fig.value / BUDGET_S:.4f} (mean / the {BUDGET_S:g} s allowed)")
    print(fig.line(f"{args.groups} groups: create, weight, read back, remove"))


if __name__ == "__main__":
    main()
